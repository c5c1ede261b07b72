package mysqlsink_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/mysqlx"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/schemas/userv1"
	mysqlsink "github.com/hyapp/roomflow/sinks/mysql"
	"github.com/hyapp/roomflow/sinks/mysql/luckyinflow"
	"github.com/hyapp/roomflow/sinks/mysql/micledger"
	"github.com/hyapp/roomflow/sinks/mysql/sinktest"
)

// appCode is the app_code of the test data and the appliers' default.
const appCode = "hyapp"

type env struct {
	k *testenv.Kafka
	m *testenv.MySQL
	// cfg is the config of every sink started (start); tests change its
	// fields before starting one.
	cfg mysqlsink.Config
	adm *kadm.Client
	// extraTopics are consumed besides the mic ledger and the inflow, by
	// the extraAppliers of every sink started.
	extraTopics   []string
	extraAppliers []mysqlsink.Registration
	// sinkDB, when set, is the pool of every sink started instead of m.DB
	// (a MySQL user of its own whose connections a test kills).
	sinkDB *sql.DB
}

func newEnv(t *testing.T, partitions int32) *env {
	t.Helper()
	k := testenv.NewKafka(t, testenv.Partitions(partitions))
	m := testenv.NewMySQL(t)
	return &env{k: k, m: m, cfg: testConfig(t, k), adm: k.Admin(t)}
}

// testConfig is a sink on k in a consumer group of this test, dead letters
// to k's DLQ topic, a 5s drain, logs discarded (SINK_TEST_LOG set: debug
// lines on stderr, franz-go's included).
func testConfig(t testing.TB, k *testenv.Kafka) mysqlsink.Config {
	log := slog.New(slog.DiscardHandler)
	if os.Getenv("SINK_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	cluster := k.Cluster()
	cluster.Logger = log
	return mysqlsink.Config{
		Group:           testenv.UniqueName(t) + "-sink",
		DLQTopic:        k.Config.Topics.DLQ,
		ShutdownTimeout: 5 * time.Second,
		Kafka:           cluster,
		Logger:          log,
	}
}

// ledgerTopic and inflowTopic are the topics of the two appliers.
func (e *env) ledgerTopic() string { return e.k.Config.Topics.MicLedger }
func (e *env) inflowTopic() string { return e.k.Config.Topics.LuckyPoolInflow }

type running struct {
	sink   *mysqlsink.Sink
	cancel context.CancelFunc
	done   chan error
}

// start runs a sink on cfg (e.cfg, or a copy a test changed) in the
// background, its metrics on a registry of its own unless cfg has one.
func (e *env) start(t *testing.T, cfg mysqlsink.Config) *running {
	t.Helper()
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	db := e.m.DB
	if e.sinkDB != nil {
		db = e.sinkDB
	}
	s, err := mysqlsink.New(cfg, sinkStore(t, db, e.k, cfg.Group, e.extraAppliers...))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{sink: s, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- s.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// sinkStore is the store `roomflow sink` builds: group, the mic ledger and
// lucky pool inflow appliers on k's topics, plus extra.
func sinkStore(t testing.TB, db *sql.DB, k *testenv.Kafka, group string, extra ...mysqlsink.Registration) *mysqlsink.Store {
	t.Helper()
	st, err := mysqlsink.NewStore(mysqlsink.StoreConfig{Group: group, Appliers: append(appliers(t, k.Config.Topics.MicLedger, k.Config.Topics.LuckyPoolInflow), extra...)}, db)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// appliers registers the mic ledger applier on ledger and the inflow
// applier on inflow, both defaulting app_code to appCode.
func appliers(t testing.TB, ledger, inflow string) []mysqlsink.Registration {
	t.Helper()
	ml, err := micledger.New(micledger.Config{Topic: ledger, DefaultAppCode: appCode})
	if err != nil {
		t.Fatal(err)
	}
	li, err := luckyinflow.New(luckyinflow.Config{Topic: inflow, DefaultAppCode: appCode})
	if err != nil {
		t.Fatal(err)
	}
	return []mysqlsink.Registration{mysqlsink.Register(ml), mysqlsink.Register(li)}
}

// newStore is a store of group with the same appliers on the topics
// "ledger" and "inflow", for tests that call Store.Apply themselves.
func newStore(t testing.TB, db *sql.DB, group string) *mysqlsink.Store {
	t.Helper()
	st, err := mysqlsink.NewStore(mysqlsink.StoreConfig{Group: group, Appliers: appliers(t, "ledger", "inflow")}, db)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// ledgerRecords are es as consecutive records of tp from offset from.
func ledgerRecords(tp mysqlsink.TP, from int64, es []*userv1.MicLedgerEntry) []mysqlsink.Record {
	out := make([]mysqlsink.Record, len(es))
	for i, e := range es {
		out[i] = mysqlsink.Record{TP: tp, Offset: from + int64(i), Item: e}
	}
	return out
}

// stop cancels the sink and returns Run's result (nil once stopped).
func (r *running) stop(t *testing.T) error {
	t.Helper()
	if r.cancel == nil {
		return nil
	}
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("sink did not stop within 30s")
	}
	return nil
}

// endOffsets returns the high watermarks of the sink's topics (the mic
// ledger, the inflow and e.extraTopics).
func (e *env) endOffsets(t *testing.T) map[mysqlsink.TP]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := e.adm.ListEndOffsets(ctx, append([]string{e.ledgerTopic(), e.inflowTopic()}, e.extraTopics...)...)
	if err != nil {
		t.Fatal(err)
	}
	out := map[mysqlsink.TP]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[mysqlsink.TP{Topic: o.Topic, Partition: o.Partition}] = o.Offset })
	return out
}

// stored returns next_offset per partition stored for group.
func stored(t *testing.T, db *sql.DB, group string) map[mysqlsink.TP]int64 {
	t.Helper()
	rows, err := db.Query("SELECT topic, partition_id, next_offset FROM roomflow_sink_offsets WHERE consumer_group = ?", group)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[mysqlsink.TP]int64{}
	for rows.Next() {
		var tp mysqlsink.TP
		var n int64
		if err := rows.Scan(&tp.Topic, &tp.Partition, &n); err != nil {
			t.Fatal(err)
		}
		out[tp] = n
	}
	return out
}

// caughtUp reports whether group's stored offsets reached every
// non-empty partition's end.
func (e *env) caughtUp(t *testing.T, group string, ends map[mysqlsink.TP]int64) bool {
	got := stored(t, e.m.DB, group)
	for tp, end := range ends {
		if end > 0 && got[tp] < end {
			return false
		}
	}
	return true
}

// waitCaughtUp waits until group has applied everything produced so far,
// failing early if a sink stops with an error.
func (e *env) waitCaughtUp(t *testing.T, group string, timeout time.Duration, rs ...*running) {
	t.Helper()
	ends := e.endOffsets(t)
	deadline := time.Now().Add(timeout)
	for !e.caughtUp(t, group, ends) {
		for _, r := range rs {
			select {
			case err := <-r.done:
				t.Fatalf("sink stopped early: %v", err)
			default:
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("sink did not catch up within %s: stored %v, ends %v", timeout, stored(t, e.m.DB, group), ends)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// dump renders every row of the sink's tables (all columns), to prove a
// replay changed nothing at all.
func dump(t *testing.T, db *sql.DB) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []string{
		"SELECT * FROM user_mic_event_consumption ORDER BY app_code, event_id",
		"SELECT * FROM user_mic_sessions ORDER BY app_code, mic_session_id",
		"SELECT * FROM user_mic_daily_stats ORDER BY app_code, user_id, stat_date",
		"SELECT * FROM user_mic_lifetime_stats ORDER BY app_code, user_id",
		"SELECT * FROM lucky_pool_inflow_consumption ORDER BY app_code, event_id",
		"SELECT * FROM lucky_pools ORDER BY app_code, scope_type, scope_id",
	} {
		rows, err := db.Query(q)
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		n := 0
		for rows.Next() {
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			for _, v := range vals {
				fmt.Fprintf(&b, "%v|", v)
			}
			b.WriteByte('\n')
			n++
		}
		rows.Close()
		fmt.Fprintf(&b, "== %s: %d rows\n", q, n)
	}
	return b.String()
}

func count(t *testing.T, db *sql.DB, q string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestMain doubles as a sink process for the SIGKILL test: with
// ROOMFLOW_SINK_CHILD set to the JSON of a childConfig it runs one sink
// (static group member "sink-child", so a restarted child takes over at
// once) until it is killed.
func TestMain(m *testing.M) {
	if c := os.Getenv("ROOMFLOW_SINK_CHILD"); c != "" {
		os.Exit(runChild(c))
	}
	os.Exit(m.Run())
}

// childConfig is what a sink child needs of its parent test.
type childConfig struct {
	Brokers              []string
	DSN                  string
	Group, DLQ           string
	Ledger, Inflow       string
	BatchSize            int
	ShutdownTimeoutMilli int64
}

// childEnv returns the environment of a sink child running like e.cfg.
func (e *env) childEnv(t *testing.T) string {
	t.Helper()
	b, err := json.Marshal(childConfig{
		Brokers: e.k.Brokers, DSN: e.m.DSN, Group: e.cfg.Group, DLQ: e.cfg.DLQTopic,
		Ledger: e.ledgerTopic(), Inflow: e.inflowTopic(), BatchSize: e.cfg.BatchSize,
		ShutdownTimeoutMilli: e.cfg.ShutdownTimeout.Milliseconds(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return "ROOMFLOW_SINK_CHILD=" + string(b)
}

// childReady is what a sink child prints once SIGTERM stops it gracefully;
// a SIGTERM before that kills it.
const childReady = "sink child: SIGTERM handler installed"

func runChild(js string) int {
	var c childConfig
	if err := json.Unmarshal([]byte(js), &c); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	fmt.Fprintln(os.Stderr, childReady)
	dc, err := mysql.ParseDSN(c.DSN)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	mysqlx.Tune(dc) // as `roomflow sink` connects
	connector, err := mysql.NewConnector(dc)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	ml, err := micledger.New(micledger.Config{Topic: c.Ledger, DefaultAppCode: appCode})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	li, err := luckyinflow.New(luckyinflow.Config{Topic: c.Inflow, DefaultAppCode: appCode})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	store, err := mysqlsink.NewStore(mysqlsink.StoreConfig{Group: c.Group, Appliers: []mysqlsink.Registration{mysqlsink.Register(ml), mysqlsink.Register(li)}}, db)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	s, err := mysqlsink.New(mysqlsink.Config{
		BatchSize:       c.BatchSize,
		Group:           c.Group,
		DLQTopic:        c.DLQ,
		ShutdownTimeout: time.Duration(c.ShutdownTimeoutMilli) * time.Millisecond,
		Kafka:           kafkax.Cluster{Brokers: c.Brokers, SessionTimeout: 10 * time.Second},
		Logger:          slog.New(slog.DiscardHandler),
		OwnerID:         fmt.Sprintf("child-%d", os.Getpid()),
		InstanceID:      "sink-child",
	}, store)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	if err := s.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	return 0
}

// produce writes ledger and inflows to their topics and returns the oracle
// of the facts they must yield.
func (e *env) produce(t *testing.T, ledger []*userv1.MicLedgerEntry, inflows []*activityv1.LuckyPoolInflow, opts ...kgo.Opt) *sinktest.Oracle {
	t.Helper()
	o := sinktest.NewOracle()
	o.AddLedger(ledger...)
	o.AddInflows(inflows...)
	recs := append(sinktest.LedgerRecords(e.ledgerTopic(), ledger), sinktest.InflowRecords(e.inflowTopic(), inflows)...)
	if err := sinktest.Produce(context.Background(), e.k.Client(t, opts...), recs); err != nil {
		t.Fatal(err)
	}
	return o
}

// applyAll runs a sink on e.cfg until it has caught up with every topic,
// stops it, and checks the tables against o.
func (e *env) applyAll(t *testing.T, o *sinktest.Oracle) {
	t.Helper()
	r := e.start(t, e.cfg)
	e.waitCaughtUp(t, e.cfg.Group, 30*time.Second, r)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if err := o.Check(context.Background(), e.m.DB); err != nil {
		t.Fatal(err)
	}
}
