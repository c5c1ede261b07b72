package imoutbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/hyapp/roomflow/internal/cfgerr/cfgerrtest"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/mysqlx"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/sinks/imoutbox"
	"github.com/hyapp/roomflow/sinks/tencentim/imfake"
)

// fallbackEnv is newEnv (no Kafka yet) with a fake IM whose app limit is
// share (a call beyond it is refused with 60007) and timings that let the
// scan fallback start within seconds: a 1s group session (kfake accepts it,
// see fallbackKafka), the fallback after 1.5s out of the group, the lock
// tried every 900ms. The holder confirms the lock every retry/3 and gives
// it up when that query takes over retry/6: at 300ms (50ms) a loaded CI
// machine handed the lock over mid-test, which the takeover test reads as
// two holders.
func fallbackEnv(t *testing.T, share int) *env {
	e := newEnv(t, false)
	e.fake = imfake.New(imfake.Config{SDKAppID: testApp, AdminIdentifier: testAdmin, SecretKey: testKey, AppCallsPerSecond: share})
	srv := httptest.NewServer(e.fake)
	t.Cleanup(srv.Close)
	e.cfg.IM.Endpoint = srv.URL
	e.cfg.IM.MaxCallsPerSecond = share
	e.cfg.Kafka.SessionTimeout = time.Second
	e.cfg.ScanFallbackAfter = 1500 * time.Millisecond
	e.cfg.ScanFallbackRetry = 900 * time.Millisecond
	return e
}

// fallbackKafka is a kfake cluster accepting the 1s group session.
func fallbackKafka(t *testing.T, opts ...kfake.Opt) []kfake.Opt {
	return append([]kfake.Opt{kfake.GroupMinSessionTimeout(100 * time.Millisecond)}, opts...)
}

// scanEvents inserts n gift events on rooms rooms, old enough for the scan.
func (e *env) scanEvents(prefix string, n, rooms int) {
	e.t.Helper()
	evs := make([]event, n)
	for i := range evs {
		evs[i] = gift(fmt.Sprintf("%s-%04d", prefix, i), fmt.Sprintf("%s-r%02d", prefix, i%rooms), int64(i/rooms+1))
	}
	e.insert(10*time.Second, evs...)
}

// checkOnceEach fails the test unless the fake IM accepted n distinct
// events, each once, and refused nothing for the app limit.
func (e *env) checkOnceEach(n int) {
	e.t.Helper()
	st := e.fake.Stats()
	if acc := e.fake.AcceptedByEvent(); len(acc) != n || st.Accepted != n {
		e.t.Fatalf("%d distinct events accepted, %d messages; want %d, each once", len(acc), st.Accepted, n)
	}
	if st.Rejected != 0 || st.Dropped != 0 || st.MaxAppPerSecond > e.cfg.IM.MaxCallsPerSecond {
		e.t.Fatalf("fake IM %+v: over the share of %d/s", st, e.cfg.IM.MaxCallsPerSecond)
	}
}

func fallbackOn(t *testing.T, reg *prometheus.Registry) bool {
	return metric(t, reg, "roomflow_im_scan_fallback", nil) == 1
}

// Kafka goes away under a replica that owns every partition: kgo ends the
// group session with OnPartitionsLost once the heartbeat has failed for a
// session timeout (its budget drops to 0), and im.scan_fallback_after
// later the replica takes the fallback lock and its compensation scan
// delivers the pending rows, each once, from MySQL alone (IM-12).
func TestScanFallbackDeliversWhenKafkaCloses(t *testing.T) {
	const share = 100
	e := fallbackEnv(t, share)
	k := testenv.NewKafka(t, testenv.Partitions(4), testenv.FakeOpts(fallbackKafka(t)...))
	if k.Fake == nil {
		t.Skip("needs kfake: a group session below a broker's group.min.session.timeout.ms, and a cluster the test closes; ROOMFLOW_KAFKA_BROKERS is set")
	}
	e.k = k
	e.cfg.Topic = k.Config.Topics.RoomEvents
	e.cfg.Kafka.Brokers = k.Brokers
	reg, _ := e.publisher(fastAndScan)
	budget := func() float64 { return metric(t, reg, "roomflow_im_call_budget_per_second", nil) }
	testenv.Eventually(t, 15*time.Second, "the replica owns every partition", func() bool { return budget() == share })

	k.Fake.Close()
	closed := time.Now()
	testenv.Eventually(t, 15*time.Second, "partitions lost once Kafka is gone", func() bool { return budget() == 0 })
	t.Logf("partitions lost %s after kfake closed (session 1s)", time.Since(closed).Round(10*time.Millisecond))
	if fallbackOn(t, reg) {
		t.Fatal("fallback on before im.scan_fallback_after")
	}

	const n = 60
	e.scanEvents("gone", n, 6)
	testenv.Eventually(t, 20*time.Second, "every pending row delivered without Kafka", func() bool { return e.countStatus("delivered") == n })
	if !fallbackOn(t, reg) || budget() != share {
		t.Fatalf("fallback gauge %v, budget %v; want 1 and the full share %d", fallbackOn(t, reg), budget(), share)
	}
	e.checkOnceEach(n)
}

// Two replicas that never reach Kafka: one takes the lock and sends,
// within the share; the other waits (gauge 0, nothing sent). When the
// holder stops, the other takes over and delivers the rest, each event
// once, the two never together above the share.
func TestScanFallbackOneHolderThenTakeover(t *testing.T) {
	const share = 40
	e := fallbackEnv(t, share)
	pa, regA := e.newPublisher(fastAndScan)
	pb, regB := e.newPublisher(fastAndScan)
	stopA, stopB := e.run(pa), e.run(pb)
	const n = 240 // 6 s at the share
	e.scanEvents("nokafka", n, 12)

	testenv.Eventually(t, 15*time.Second, "a holder delivering", func() bool {
		return (fallbackOn(t, regA) || fallbackOn(t, regB)) && e.countStatus("delivered") >= n/4
	})
	holder, regH, regW, stopH := pa, regA, regB, stopA
	if fallbackOn(t, regB) {
		holder, regH, regW, stopH = pb, regB, regA, stopB
	}
	if fallbackOn(t, regW) {
		t.Fatal("both replicas in the fallback")
	}
	var others int
	if err := e.db.QueryRow(`SELECT COUNT(*) FROM room_outbox WHERE status = 'delivered' AND worker_id <> ?`, holder.Service.WorkerID()).Scan(&others); err != nil {
		t.Fatal(err)
	}
	sent := metric(t, regW, "roomflow_im_outbox_events_total", map[string]string{"source": "scan", "outcome": "delivered"})
	if others != 0 || sent != 0 {
		t.Fatalf("the replica without the lock delivered (%d rows by another worker, %v by its scan)", others, sent)
	}

	stopH()
	if fallbackOn(t, regH) {
		t.Fatal("the stopped holder's gauge is still 1")
	}
	left := n - e.countStatus("delivered")
	if left == 0 {
		t.Fatal("nothing left for the takeover: raise n")
	}
	testenv.Eventually(t, 20*time.Second, "the other replica takes over and delivers the rest", func() bool {
		return e.countStatus("delivered") == n
	})
	if !fallbackOn(t, regW) {
		t.Fatal("the replica that took over has gauge 0")
	}
	t.Logf("%d of %d rows left to the takeover; fake IM %+v", left, n, e.fake.Stats())
	if got := metric(t, regW, "roomflow_im_outbox_events_total", map[string]string{"source": "scan", "outcome": "delivered"}); got == 0 {
		t.Fatalf("the replica that took over delivered nothing")
	}
	e.checkOnceEach(n)
}

// A replica in the fallback (Kafka never reached) leaves it and releases
// the lock as soon as Kafka comes up and its fast path owns partitions.
func TestScanFallbackEndsWhenKafkaIsBack(t *testing.T) {
	const share = 100
	e := fallbackEnv(t, share)
	addr := testenv.ClosedAddr(t) // Kafka will come up here
	_, portS, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portS)
	e.cfg.Kafka.Brokers = []string{addr}
	e.cfg.Topic = testenv.UniqueName(t) + ".room-events"
	reg, _ := e.publisher(fastAndScan)

	const n = 20
	e.scanEvents("before", n, 4)
	testenv.Eventually(t, 15*time.Second, "rows delivered in the fallback", func() bool { return e.countStatus("delivered") == n })
	if !fallbackOn(t, reg) {
		t.Fatal("delivered without Kafka, but the fallback gauge is 0")
	}
	var database string
	if err := e.db.QueryRow(`SELECT DATABASE()`).Scan(&database); err != nil {
		t.Fatal(err)
	}
	lockHeld := func() bool {
		var free int
		if err := e.db.QueryRow(`SELECT IS_FREE_LOCK(?)`, imoutbox.LockName(database, testApp)).Scan(&free); err != nil {
			t.Fatal(err)
		}
		return free == 0
	}
	if !lockHeld() {
		t.Fatal("in the fallback without the lock")
	}

	c, err := kfake.NewCluster(fallbackKafka(t, kfake.Ports(port), kfake.SeedTopics(4, e.cfg.Topic))...)
	if err != nil {
		t.Fatalf("kfake on %s: %v", addr, err)
	}
	t.Cleanup(c.Close)
	testenv.Eventually(t, 20*time.Second, "the fallback ends once the fast path owns partitions", func() bool {
		return !fallbackOn(t, reg) && metric(t, reg, "roomflow_im_call_budget_per_second", nil) == share && !lockHeld()
	})
}

// The fallback holds its MySQL lock on a connection of its own while it
// is on, so on a pool of one connection (mysql.max_open_conns: 1) the scan
// it turns on never gets one: the gauge says 1 and nothing is delivered; a
// publisher on two connections then delivers every row. NewPublisher
// refuses a pool of one, naming the field ConfigFrom maps to
// mysql.max_open_conns.
func TestScanFallbackNeedsTwoConnections(t *testing.T) {
	e := fallbackEnv(t, 100)
	e.cfg.Kafka.Brokers = []string{testenv.ClosedAddr(t)} // never reached: the fallback comes on
	e.cfg.Topic = testenv.UniqueName(t) + ".room-events"
	pool := func(conns int) *sql.DB {
		db, err := mysqlx.Open(context.Background(), config.MySQLConfig{DSN: e.m.DSN, MaxOpenConns: conns})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	one := pool(1)
	_, err := imoutbox.NewPublisher(e.publisherConfig(fastAndScan, prometheus.NewRegistry()), one)
	cfgerrtest.NamesKey(t, "pool_conns", err)

	// What NewPublisher refuses, under a running publisher: built on two
	// connections, run on one.
	one.SetMaxOpenConns(2)
	reg := prometheus.NewRegistry()
	p, err := imoutbox.NewPublisher(e.publisherConfig(fastAndScan, reg), one)
	if err != nil {
		t.Fatal(err)
	}
	one.SetMaxOpenConns(1)
	stop := e.run(p)
	const n = 20
	e.scanEvents("one", n, 4)
	testenv.Eventually(t, 15*time.Second, "the fallback on", func() bool { return fallbackOn(t, reg) })
	time.Sleep(3 * time.Second) // 30 scan intervals
	if got := e.countStatus("delivered"); got != 0 {
		t.Fatalf("%d rows delivered on one connection, want none (the lock holds it)", got)
	}
	stop()

	p, err = imoutbox.NewPublisher(e.publisherConfig(fastAndScan, prometheus.NewRegistry()), pool(2))
	if err != nil {
		t.Fatal(err)
	}
	e.run(p)
	testenv.Eventually(t, 20*time.Second, "every row delivered on two connections", func() bool { return e.countStatus("delivered") == n })
}
