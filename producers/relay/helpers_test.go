package relay_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/producers/relay"
)

// outboxRow is what a test writes into room_outbox.
type outboxRow struct {
	eventID   string
	eventType string
	roomID    string
	version   int64
	payload   []byte
	occurred  int64
}

// insertRows writes rows with one multi-row INSERT on q (a *sql.DB or *sql.Tx).
func insertRows(ctx context.Context, q interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, rows []outboxRow) error {
	if len(rows) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("INSERT INTO room_outbox (app_code, event_id, event_type, room_id, room_version, payload, occurred_at_ms, created_at_ms, updated_at_ms) VALUES ")
	args := make([]any, 0, len(rows)*9)
	for i, r := range rows {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("(?,?,?,?,?,?,?,?,?)")
		p := r.payload
		if p == nil {
			p = []byte{}
		}
		args = append(args, "hyapp", r.eventID, r.eventType, r.roomID, r.version, p, r.occurred, r.occurred, r.occurred)
	}
	_, err := q.ExecContext(ctx, b.String(), args...)
	return err
}

// payloadFor is a deterministic payload of n bytes for an event id, so the
// oracle can check bytes without storing them.
func payloadFor(eventID string, n int) []byte {
	p := make([]byte, n)
	seed := []byte(eventID)
	for i := range p {
		p[i] = seed[i%len(seed)] ^ byte(i)
	}
	return p
}

// writers inserts total rows with nWriters concurrent writers; writer w
// owns rooms "r<w>-<k>" and bumps each room's version by one per row, the
// way room-service serialises a room. Each transaction inserts perTxn
// rows. pace > 0 sleeps between transactions.
func writers(ctx context.Context, db *sql.DB, prefix string, total, nWriters, perTxn, payloadBytes int, pace time.Duration) error {
	var wg sync.WaitGroup
	errs := make(chan error, nWriters)
	per := total / nWriters
	for w := range nWriters {
		n := per
		if w == nWriters-1 {
			n = total - per*(nWriters-1)
		}
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(w), 7))
			versions := map[string]int64{}
			for done := 0; done < n; {
				k := min(perTxn, n-done)
				rows := make([]outboxRow, k)
				for i := range rows {
					room := fmt.Sprintf("%sr%d-%d", prefix, w, rnd.IntN(20))
					versions[room]++
					id := fmt.Sprintf("%sw%d-%d", prefix, w, done+i)
					rows[i] = outboxRow{eventID: id, eventType: "RoomMicChanged", roomID: room, version: versions[room],
						payload: payloadFor(id, payloadBytes), occurred: time.Now().UnixMilli()}
				}
				if err := insertRows(ctx, db, rows); err != nil {
					errs <- err
					return
				}
				done += k
				if pace > 0 {
					time.Sleep(pace)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// relayed is one committed record as a read_committed consumer saw it.
type relayed struct {
	topic     string
	partition int32
	offset    int64
	key       string
	value     []byte
	ts        time.Time
	headers   map[string]string
}

func (r relayed) eventID() string { return r.headers["event_id"] }

func (r relayed) version() int64 {
	v, _ := strconv.ParseInt(r.headers["room_version"], 10, 64)
	return v
}

// drain reads every committed record of topics (see
// testenv.Kafka.DrainCommitted: only when the relay stopped).
func drain(t testing.TB, k *testenv.Kafka, topics ...string) []relayed {
	t.Helper()
	var out []relayed
	for _, r := range k.DrainCommitted(t, topics...) {
		h := map[string]string{}
		for _, x := range r.Headers {
			h[x.Key] = string(x.Value)
		}
		out = append(out, relayed{topic: r.Topic, partition: r.Partition, offset: r.Offset, key: string(r.Key),
			value: r.Value, ts: r.Timestamp, headers: h})
	}
	return out
}

// oracle is the set of rows in MySQL: what Kafka must hold exactly once.
type oracleRow struct {
	id       uint64
	eventID  string
	roomID   string
	version  int64
	payload  []byte
	occurred int64
}

func loadOracle(t testing.TB, db *sql.DB) map[string]oracleRow {
	t.Helper()
	rs, err := db.Query("SELECT id, event_id, room_id, room_version, payload, occurred_at_ms FROM room_outbox")
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	out := map[string]oracleRow{}
	for rs.Next() {
		var r oracleRow
		if err := rs.Scan(&r.id, &r.eventID, &r.roomID, &r.version, &r.payload, &r.occurred); err != nil {
			t.Fatal(err)
		}
		out[r.eventID] = r
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkExactlyOnce compares the relayed records to the MySQL oracle: every
// row exactly once, bytes and key as stored, and per room the versions in
// partition order strictly increasing.
func checkExactlyOnce(t testing.TB, oracle map[string]oracleRow, got []relayed) {
	t.Helper()
	seen := map[string]int{}
	dups, bad := 0, 0
	for _, r := range got {
		id := r.eventID()
		seen[id]++
		if seen[id] == 2 {
			dups++
			if dups <= 5 {
				t.Errorf("event %s relayed more than once", id)
			}
		}
		o, ok := oracle[id]
		if !ok {
			t.Errorf("event %s in Kafka but not in MySQL", id)
			continue
		}
		if r.key != o.roomID || !bytes.Equal(r.value, o.payload) || r.version() != o.version || r.ts.UnixMilli() != o.occurred {
			bad++
			if bad <= 5 {
				t.Errorf("event %s: record differs from its row (key %q/%q, version %d/%d)", id, r.key, o.roomID, r.version(), o.version)
			}
		}
	}
	missing := 0
	for id := range oracle {
		if seen[id] == 0 {
			missing++
			if missing <= 5 {
				t.Errorf("event %s (id %d) never relayed", id, oracle[id].id)
			}
		}
	}
	// Per-room order: records of one room share a partition (key room_id);
	// got is in partition-offset order per partition.
	last := map[string]int64{}
	disorder := 0
	for _, r := range got {
		if v := r.version(); v <= last[r.key] {
			disorder++
			if disorder <= 5 {
				t.Errorf("room %s: version %d after %d", r.key, v, last[r.key])
			}
		} else {
			last[r.key] = v
		}
	}
	if dups+missing+bad+disorder > 0 {
		t.Fatalf("exactly-once check failed: %d rows, %d records, %d duplicates, %d missing, %d mismatched, %d out of order",
			len(oracle), len(got), dups, missing, bad, disorder)
	}
	t.Logf("exactly once: %d rows, %d records, per-room order kept", len(oracle), len(got))
}

// waitCount reads topic read_committed from the start until count
// committed records arrived, or fails after d.
func waitCount(t testing.TB, k *testenv.Kafka, topic string, count int, d time.Duration) {
	t.Helper()
	if n, ok := countWithin(t, k, topic, count, d); !ok {
		t.Fatalf("waited %s for %d records on %s, saw %d", d, count, topic, n)
	}
}

// countWithin reads topic read_committed from the start until count
// committed records arrived or d passed, and returns how many it saw.
func countWithin(t testing.TB, k *testenv.Kafka, topic string, count int, d time.Duration) (int, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cl := k.Client(t, kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	n := 0
	for n < count {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return n, false
		}
		n += fs.NumRecords()
	}
	return n, true
}

// testConfig is a relay on k's topics with a transactional id of its own,
// tuned for fast tests; the other settings keep New's defaults.
func testConfig(t testing.TB, k *testenv.Kafka) relay.Config {
	cfg := relay.Config{
		TransactionalID: testenv.UniqueName(t) + "-relay",
		Topic:           k.Config.Topics.RoomEvents,
		DLQTopic:        k.Config.Topics.DLQ,
		OffsetsTopic:    k.Config.Topics.RelayOffsets,
		PollInterval:    20 * time.Millisecond,
		ShutdownTimeout: 10 * time.Second,
		FailoverTimeout: 9 * time.Second, // session 6s: a default broker's minimum
		Kafka:           k.Cluster(),
	}
	if k.Fake != nil {
		cfg.FailoverTimeout = 3 * time.Second
	}
	return cfg
}

// unconnectedConfig is a valid relay config whose broker accepts no
// connection.
func unconnectedConfig(t testing.TB) relay.Config {
	return relay.Config{
		TransactionalID: testenv.UniqueName(t) + "-relay",
		Topic:           "events",
		DLQTopic:        "dlq",
		OffsetsTopic:    "offsets",
		Kafka:           kafkax.Cluster{Brokers: []string{testenv.ClosedAddr(t)}},
	}
}

// newKafka is a cluster whose group session minimum allows short tests.
func newKafka(t testing.TB) *testenv.Kafka {
	return testenv.NewKafka(t, testenv.FakeOpts(kfake.GroupMinSessionTimeout(200*time.Millisecond)))
}

// running is an in-process relay.
type running struct {
	r      *relay.Relay
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan struct{} // closed when Run returned
	err    error
}

func (x *running) stop(t testing.TB) {
	t.Helper()
	x.cancel()
	select {
	case <-x.done:
		if x.err != nil {
			t.Fatalf("relay returned %v", x.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("relay did not stop within 30s")
	}
}

// startRelay runs a relay on cfg with a registry of its own and log (nil:
// info and above to t.Log) for the relay's and its Kafka clients' lines.
func startRelay(t testing.TB, cfg relay.Config, db *sql.DB, log *slog.Logger) *running {
	t.Helper()
	reg := prometheus.NewRegistry()
	if log == nil {
		log = infoLogger(t)
	}
	cfg.Logger, cfg.Registerer, cfg.Kafka.Logger = log, reg, log
	if os.Getenv("ROOMFLOW_RELAY_HELPER_KGO_DEBUG") == "1" {
		cfg.Kafka.Extra = append(slices.Clip(cfg.Kafka.Extra), kgo.WithLogger(kgo.BasicLogger(testWriter{t}, kgo.LogLevelDebug, nil)))
	}
	r, err := relay.New(cfg, db)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	x := &running{r: r, reg: reg, cancel: cancel, done: make(chan struct{})}
	go func() { x.err = r.Run(ctx); close(x.done) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-x.done:
		case <-time.After(30 * time.Second):
		}
	})
	return x
}

// withHooks is cfg with hooks h.
func withHooks(cfg relay.Config, h relay.Hooks) relay.Config {
	cfg.Hooks = h
	return cfg
}

// metric is testenv.Metric on reg, failing the test when no series of
// name has labels (name/value pairs).
func metric(t testing.TB, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	v, ok := testenv.Metric(reg, name, labels...)
	if !ok {
		t.Fatalf("metric %s %v not found", name, labels)
	}
	return v
}

// testWriter sends log lines to t.Log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// infoLogger logs info and above to t.Log (shown when the test fails).
func infoLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// quietLogger logs warnings and errors only, to t.Log.
func quietLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// streamWriters inserts rows like writers, without a total, until stop is
// closed; it returns the first error.
func streamWriters(ctx context.Context, db *sql.DB, prefix string, nWriters, perTxn, payloadBytes int, pace time.Duration, stop <-chan struct{}) error {
	var wg sync.WaitGroup
	errs := make(chan error, nWriters)
	for w := range nWriters {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(w), 11))
			versions := map[string]int64{}
			for n := 0; ; n += perTxn {
				select {
				case <-stop:
					return
				default:
				}
				rows := make([]outboxRow, perTxn)
				for i := range rows {
					room := fmt.Sprintf("%sr%d-%d", prefix, w, rnd.IntN(20))
					versions[room]++
					id := fmt.Sprintf("%sw%d-%d", prefix, w, n+i)
					rows[i] = outboxRow{eventID: id, eventType: "RoomMicChanged", roomID: room, version: versions[room],
						payload: payloadFor(id, payloadBytes), occurred: time.Now().UnixMilli()}
				}
				if err := insertRows(ctx, db, rows); err != nil {
					errs <- err
					return
				}
				time.Sleep(pace)
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func countRows(t testing.TB, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM room_outbox").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// createTopic creates topic with 3 partitions and the given
// max.message.bytes.
func createTopic(t testing.TB, k *testenv.Kafka, topic string, maxMessageBytes int) {
	t.Helper()
	resp, err := k.Admin(t).CreateTopic(context.Background(), 3, -1, map[string]*string{"max.message.bytes": kadm.StringPtr(strconv.Itoa(maxMessageBytes))}, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatal(err)
	}
}

// logTransactions logs, for a relay that cannot read its position back,
// what holds topic's last stable offset: each partition's high watermark
// and last stable offset, the producers with a transaction open on it,
// and the coordinator's transactions. An open producer the coordinator
// does not list as Ongoing holds the offset for good.
func logTransactions(t testing.TB, k *testenv.Kafka, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	adm := k.Admin(t)
	end, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Logf("transactions: end offsets: %v", err)
		return
	}
	stable, err := adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		t.Logf("transactions: stable offsets: %v", err)
		return
	}
	end.Each(func(o kadm.ListedOffset) {
		s, _ := stable.Lookup(o.Topic, o.Partition)
		t.Logf("transactions: %s/%d high watermark %d, last stable offset %d", o.Topic, o.Partition, o.Offset, s.Offset)
	})
	producers, err := adm.DescribeProducers(ctx, kadm.TopicsSet{topic: nil})
	if err != nil {
		t.Logf("transactions: describe producers: %v", err)
	}
	producers.EachProducer(func(p kadm.DescribedProducer) {
		if p.CurrentTxnStartOffset >= 0 {
			t.Logf("transactions: producer %d epoch %d has a transaction open on %s/%d from offset %d", p.ProducerID, p.ProducerEpoch, p.Topic, p.Partition, p.CurrentTxnStartOffset)
		}
	})
	txns, err := adm.DescribeTransactions(ctx)
	if err != nil {
		t.Logf("transactions: describe transactions: %v", err)
	}
	for _, x := range txns {
		t.Logf("transactions: %s producer %d epoch %d %s since %d, partitions %v", x.TxnID, x.ProducerID, x.ProducerEpoch, x.State, x.StartTimestamp, x.Topics)
	}
}
