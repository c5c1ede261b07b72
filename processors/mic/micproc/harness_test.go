package micproc_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/processors/mic"
	"github.com/hyapp/roomflow/processors/mic/micproc"
	"github.com/hyapp/roomflow/processors/mic/mictest"
	"github.com/hyapp/roomflow/processors/streams"
	"github.com/hyapp/roomflow/processors/streams/rttest"
	"github.com/hyapp/roomflow/schemas/envelope"
	"github.com/hyapp/roomflow/schemas/userv1"
)

// env is one Kafka cluster with the mic topics and a config on it, or,
// made by newMemEnv, the in-memory driver (rttest.Driver) with the config.
type env struct {
	t    *testing.T
	k    *testenv.Kafka
	d    *rttest.Driver // see driver
	proc *micproc.Processor
	// memPartitions > 0: the env runs on the driver (newMemEnv)
	memPartitions int
	cfg           micproc.Config
	clock         *rttest.Clock
	reg           *prometheus.Registry
	txnID         string
}

func newEnv(t *testing.T, partitions int32, clockAt time.Time) *env {
	t.Helper()
	k := testenv.NewKafka(t, testenv.Partitions(partitions))
	cfg := testConfig(t, k)
	cfg.Runtime.CommitInterval = 50 * time.Millisecond
	cfg.Runtime.CommitRecords = 1000
	cfg.Runtime.ShutdownTimeout = 10 * time.Second
	return &env{t: t, k: k, cfg: cfg, clock: rttest.NewClock(clockAt), reg: prometheus.NewRegistry(),
		txnID: testenv.UniqueName(t) + "-mic"}
}

// testConfig is the mic processor's config on k (nil: the default topic
// names and no brokers, for the in-memory driver), in a group of its own,
// with the settings of the application's defaults spelled out (tests read
// them).
func testConfig(t testing.TB, k *testenv.Kafka) micproc.Config {
	c := testenv.Config(t, k, nil)
	tp := c.Kafka.Topics
	var kafka kafkax.Cluster
	if k != nil {
		kafka = k.Cluster()
	}
	return micproc.Config{
		Runtime: streams.Config{Input: tp.UserMicEvents, Group: testenv.UniqueName(t) + "-mic", Changelog: tp.MicStateChangelog,
			DLQ: tp.DLQ, Kafka: kafka},
		Topics: micproc.Topics{Ledger: tp.MicLedger, SessionClosed: tp.MicSessionClosed, DailyStats: tp.MicDailyStats,
			LifetimeStats: tp.MicLifetimeStats, DailyTotals: tp.MicDailyTotals, LifetimeTotals: tp.MicLifetimeTotals},
		Settings: micproc.Settings{
			Policy:                 mic.Policy{PendingPublishMaxAge: 2 * time.Minute, PublishingSessionMaxAge: 12 * time.Hour},
			CompensationInterval:   60 * time.Second,
			CompensationBatchSize:  100,
			ClosedSessionRetention: 7 * 24 * time.Hour,
			DayRoomRetention:       48 * time.Hour,
			DayTotalsRetention:     72 * time.Hour,
		},
		AppCode: c.AppCode,
	}
}

// newMemEnv runs the processor on rttest.Driver: its behaviour in
// milliseconds, without a broker. Inputs are spread over partitions by key
// as the producer spreads them on the topic, so each partition's task has
// its own store and watermark as on Kafka; the clock is the runtime clock.
// The driver starts with the first produce, on e.cfg as it is then.
func newMemEnv(t *testing.T, partitions int, clockAt time.Time) *env {
	t.Helper()
	return &env{t: t, cfg: testConfig(t, nil), clock: rttest.NewClock(clockAt), reg: prometheus.NewRegistry(),
		memPartitions: partitions}
}

// driver is the env's in-memory driver, nil on Kafka.
func (e *env) driver() *rttest.Driver {
	e.t.Helper()
	if e.d == nil && e.memPartitions > 0 {
		cfg := e.cfg
		cfg.Runtime.Registerer, cfg.Runtime.Logger = e.reg, testLogger()
		p, err := micproc.New(cfg)
		if err != nil {
			e.t.Fatal(err)
		}
		e.proc = p
		e.d = rttest.NewDriver(e.t, rttest.DriverConfig{Input: cfg.Runtime.Input, Stateful: true, Clock: e.clock,
			Partitions: e.memPartitions, Logger: testLogger()}, p)
	}
	return e.d
}

// tick runs the compensation timer once on the driver, its catch-up runs
// (MoreDue) included, as a runtime tick does once each task has caught up
// (on Kafka the runtime ticks by itself).
func (e *env) tick() {
	e.t.Helper()
	if d := e.driver(); d != nil {
		if err := d.Punctuate(e.proc.Compensate); err != nil {
			e.t.Fatalf("compensation: %v", err)
		}
	}
}

func testLogger() *slog.Logger {
	if os.Getenv("ROOMFLOW_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

type running struct {
	rt     *streams.Runtime
	cancel context.CancelFunc
	done   chan struct{} // closed when Run returned
	err    error
}

// start runs a mic processor instance (same transactional id every time,
// so a restart fences its predecessor like a restarted pod).
func (e *env) start() *running {
	e.t.Helper()
	cfg := e.cfg
	r := &cfg.Runtime
	r.Registerer, r.Logger = e.reg, testLogger()
	r.Now = e.clock.Now
	r.TransactionalID = e.txnID
	r.Kafka.Extra = append(slices.Clip(r.Kafka.Extra), kgo.RebalanceTimeout(5*time.Second))
	r.Kafka.SessionTimeout = 6 * time.Second
	r.RetryBackoffMin, r.RetryBackoffMax = 20*time.Millisecond, 200*time.Millisecond
	r.LagInterval = -1
	rt, _, err := micproc.NewRuntime(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	run := &running{rt: rt, cancel: cancel, done: make(chan struct{})}
	go func() { run.err = rt.Run(ctx); close(run.done) }()
	e.t.Cleanup(func() {
		cancel()
		select {
		case <-run.done:
		case <-time.After(20 * time.Second):
		}
	})
	return run
}

func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case <-r.done:
		if r.err != nil {
			t.Fatalf("Run after cancel: %v", r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

func (r *running) kill(t *testing.T) {
	t.Helper()
	r.rt.Kill()
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after Kill")
	}
	r.cancel()
}

// waitAssigned waits until the instance owns n partitions.
func (r *running) waitAssigned(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(r.rt.Assigned()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("instance owns %d partitions, want %d", len(r.rt.Assigned()), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// produce writes events to the mic events topic keyed by user_id, as the
// room processor does.
func (e *env) produce(evs []mic.Event) {
	e.t.Helper()
	recs := make([]*kgo.Record, 0, len(evs))
	for i := range evs {
		ev := &evs[i]
		recs = append(recs, &kgo.Record{Topic: e.cfg.Runtime.Input, Key: []byte(strconv.FormatInt(ev.UserID, 10)),
			Value: ev.Encode(), Headers: envelope.AppendHeaders(nil, []byte(ev.EventID), []byte(mic.EventTypeRoomMicChanged), []byte(ev.AppCode))})
	}
	e.produceRaw(recs)
}

func (e *env) produceRaw(recs []*kgo.Record) {
	e.t.Helper()
	if d := e.driver(); d != nil {
		d.MustFeed(recs...)
		return
	}
	rttest.Produce(e.t, e.k.Client(e.t), recs)
}

// outputs is everything the processor committed.
type outputs struct {
	ledger   []*userv1.MicLedgerEntry
	closed   []*userv1.UserMicSessionClosed
	daily    []*userv1.UserMicDailyStatsUpdated
	lifetime []*userv1.UserMicLifetimeStatsUpdated
	// the totals topics, in commit order
	dailyTotals    []*userv1.UserMicDailyTotals
	lifetimeTotals []*userv1.UserMicLifetimeTotals
	dlq            []*kgo.Record
	// dlqReasons are the DLQ records' error_reason (a dead letter's
	// reason on the driver)
	dlqReasons []string
}

// collect reads the committed outputs once the ledger holds wantLedger
// entries and nothing more arrives for a moment (so extra entries are
// caught), checking each record's key and headers against its payload.
func (e *env) collect(wantLedger int, timeout time.Duration) *outputs {
	e.t.Helper()
	o := e.read(wantLedger, timeout)
	if len(o.ledger) != wantLedger {
		e.t.Fatalf("ledger has %d entries, want %d", len(o.ledger), wantLedger)
	}
	return o
}

// read is collect without the count check.
func (e *env) read(wantLedger int, timeout time.Duration) *outputs {
	e.t.Helper()
	if d := e.driver(); d != nil {
		o := &outputs{}
		for _, r := range d.Output("") {
			e.add(o, r)
		}
		for _, dl := range d.DeadLetters() {
			o.dlq = append(o.dlq, dl.Record)
			o.dlqReasons = append(o.dlqReasons, dl.Reason)
		}
		return o
	}
	tp := e.cfg.Topics
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.k.Brokers...),
		kgo.ConsumeTopics(tp.Ledger, tp.SessionClosed, tp.DailyStats, tp.LifetimeStats, tp.DailyTotals, tp.LifetimeTotals,
			e.cfg.Runtime.DLQ),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	o := &outputs{}
	deadline, lastNew := time.Now().Add(timeout), time.Now()
	for time.Now().Before(deadline) && (len(o.ledger) < wantLedger || time.Since(lastNew) < 250*time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			lastNew = time.Now()
			e.add(o, r)
		})
	}
	return o
}

// add decodes a committed output record into o.
func (e *env) add(o *outputs, r *kgo.Record) {
	e.t.Helper()
	tp := e.cfg.Topics
	switch r.Topic {
	case tp.Ledger:
		m := &userv1.MicLedgerEntry{}
		e.decode(r, m, func() (string, string, string, int64) { return m.EventId, m.EventType, m.AppCode, m.UserId })
		o.ledger = append(o.ledger, m)
	case tp.SessionClosed:
		m := &userv1.UserMicSessionClosed{}
		e.decode(r, m, func() (string, string, string, int64) {
			return m.EventId, mic.EventTypeSessionClosed, m.AppCode, m.UserId
		})
		o.closed = append(o.closed, m)
	case tp.DailyStats:
		m := &userv1.UserMicDailyStatsUpdated{}
		e.decode(r, m, func() (string, string, string, int64) {
			return m.EventId, mic.EventTypeDailyStatsUpdated, m.AppCode, m.UserId
		})
		o.daily = append(o.daily, m)
	case tp.LifetimeStats:
		m := &userv1.UserMicLifetimeStatsUpdated{}
		e.decode(r, m, func() (string, string, string, int64) {
			return m.EventId, mic.EventTypeLifetimeStatsUpdated, m.AppCode, m.UserId
		})
		o.lifetime = append(o.lifetime, m)
	case tp.DailyTotals:
		m := &userv1.UserMicDailyTotals{}
		e.decodeTotals(r, m, mic.EventTypeDailyTotals, m.GetEventId, m.GetAppCode, m.GetUserId, m.GetStatDate)
		o.dailyTotals = append(o.dailyTotals, m)
	case tp.LifetimeTotals:
		m := &userv1.UserMicLifetimeTotals{}
		e.decodeTotals(r, m, mic.EventTypeLifetimeTotals, m.GetEventId, m.GetAppCode, m.GetUserId, func() string { return "" })
		o.lifetimeTotals = append(o.lifetimeTotals, m)
	case e.cfg.Runtime.DLQ:
		o.dlq = append(o.dlq, r)
		o.dlqReasons = append(o.dlqReasons, rttest.Header(r, "error_reason"))
	}
}

func (e *env) decode(r *kgo.Record, m proto.Message, ids func() (string, string, string, int64)) {
	e.t.Helper()
	if err := proto.Unmarshal(r.Value, m); err != nil {
		e.t.Fatalf("%s@%d: %v", r.Topic, r.Offset, err)
	}
	id, typ, app, user := ids()
	if string(r.Key) != strconv.FormatInt(user, 10) || rttest.Header(r, "event_id") != id ||
		rttest.Header(r, "event_type") != typ || rttest.Header(r, "app_code") != app ||
		rttest.Header(r, "content-type") != "application/x-protobuf" {
		e.t.Fatalf("%s@%d: key %q headers %v do not match payload %v", r.Topic, r.Offset, r.Key, r.Headers, m)
	}
}

// decodeTotals decodes a totals record and checks its key
// ({app_code}:{user_id}, with :{stat_date} for a day) and headers.
func (e *env) decodeTotals(r *kgo.Record, m proto.Message, typ string, id, app func() string, user func() int64, date func() string) {
	e.t.Helper()
	if err := proto.Unmarshal(r.Value, m); err != nil {
		e.t.Fatalf("%s@%d: %v", r.Topic, r.Offset, err)
	}
	key := app() + ":" + strconv.FormatInt(user(), 10)
	if date() != "" {
		key += ":" + date()
	}
	if string(r.Key) != key || rttest.Header(r, "event_id") != id() || rttest.Header(r, "event_type") != typ ||
		rttest.Header(r, "app_code") != app() || rttest.Header(r, "content-type") != "application/x-protobuf" {
		e.t.Fatalf("%s@%d: key %q headers %v do not match payload %v", r.Topic, r.Offset, r.Key, r.Headers, m)
	}
}

// forUser filters the outputs of one user.
func (o *outputs) forUser(u int64) *outputs {
	return &outputs{ledger: ofUser(o.ledger, u), closed: ofUser(o.closed, u), daily: ofUser(o.daily, u), lifetime: ofUser(o.lifetime, u)}
}

func ofUser[M interface{ GetUserId() int64 }](ms []M, u int64) []M {
	return slices.DeleteFunc(slices.Clone(ms), func(m M) bool { return m.GetUserId() != u })
}

// tally applies the ledger like the sink.
func (o *outputs) tally() *mictest.Tally {
	t := mictest.NewTally()
	for _, m := range o.ledger {
		t.Apply(m)
	}
	return t
}

// expectedLedger runs the pure engine over the stream: the processor must
// emit exactly these entries (by event_id), whatever crashed in between.
func expectedLedger(evs []mic.Event) map[string]*userv1.MicLedgerEntry {
	st := mic.NewMapState()
	out := map[string]*userv1.MicLedgerEntry{}
	for i := range evs {
		o := mic.Handle(st, &evs[i])
		if o.Ledger != nil {
			if prev, ok := out[o.Ledger.EventId]; ok && prev.Status == mic.StatusConsumed {
				continue // a skipped repeat of an applied id: the sink keeps the first
			}
			out[o.Ledger.EventId] = o.Ledger
		}
	}
	return out
}

// countLedger is how many entries the pure engine emits for the stream.
func countLedger(evs []mic.Event) int {
	st := mic.NewMapState()
	n := 0
	for i := range evs {
		if o := mic.Handle(st, &evs[i]); o.Ledger != nil {
			n++
		}
	}
	return n
}

func mictestUser(u int64) mictest.UserKey { return mictest.UserKey{AppCode: "hy", UserID: u} }

// TestConfigValidate: New and NewRuntime refuse an invalid config with the
// key of the field; New checks only the processor's own fields, so the
// in-memory driver needs no runtime; zero settings take their defaults.
func TestConfigValidate(t *testing.T) {
	valid := testConfig(t, nil)
	valid.Runtime.Kafka.Brokers = []string{"localhost:9092"}
	for key, set := range map[string]func(*micproc.Config){
		"topics.ledger":                              func(c *micproc.Config) { c.Topics.Ledger = "" },
		"topics.lifetime_stats":                      func(c *micproc.Config) { c.Topics.LifetimeStats = "" },
		"settings.policy.pending_publish_max_age":    func(c *micproc.Config) { c.Settings.Policy.PendingPublishMaxAge = -1 },
		"settings.policy.publishing_session_max_age": func(c *micproc.Config) { c.Settings.Policy.PublishingSessionMaxAge = -1 },
		"settings.compensation_interval":             func(c *micproc.Config) { c.Settings.CompensationInterval = -1 },
		"settings.compensation_batch_size":           func(c *micproc.Config) { c.Settings.CompensationBatchSize = -1 },
		"settings.closed_session_retention":          func(c *micproc.Config) { c.Settings.ClosedSessionRetention = -1 },
		"settings.day_room_retention":                func(c *micproc.Config) { c.Settings.DayRoomRetention = 23 * time.Hour },
		"settings.day_totals_retention":              func(c *micproc.Config) { c.Settings.DayTotalsRetention = 35 * time.Hour },
		"topics.daily_totals":                        func(c *micproc.Config) { c.Topics.DailyTotals = "" },
		"app_code":                                   func(c *micproc.Config) { c.AppCode = strings.Repeat("a", 33) },
	} {
		c := valid
		set(&c)
		if _, err := micproc.New(c); err == nil || !strings.Contains(err.Error(), "config: "+key+": ") {
			t.Errorf("New: %s: %v", key, err)
		}
		if _, _, err := micproc.NewRuntime(c); err == nil || !strings.Contains(err.Error(), "config: "+key+": ") {
			t.Errorf("NewRuntime: %s: %v", key, err)
		}
	}
	for key, set := range map[string]func(*micproc.Config){
		"runtime.changelog":     func(c *micproc.Config) { c.Runtime.Changelog = "" },
		"runtime.group":         func(c *micproc.Config) { c.Runtime.Group = "" },
		"runtime.kafka.brokers": func(c *micproc.Config) { c.Runtime.Kafka.Brokers = nil },
	} {
		c := valid
		set(&c)
		if _, err := micproc.New(c); err != nil {
			t.Errorf("New checks the runtime's %s: %v", key, err)
		}
		if _, _, err := micproc.NewRuntime(c); err == nil || !strings.Contains(err.Error(), "config: "+key+": ") {
			t.Errorf("NewRuntime: %s: %v", key, err)
		}
	}
	zero := valid
	zero.Settings = micproc.Settings{}
	rt, _, err := micproc.NewRuntime(zero)
	if err != nil {
		t.Fatalf("zero settings (defaults): %v", err)
	}
	if err := rt.Ready(); err == nil || !strings.Contains(err.Error(), "runtime "+micproc.Name+":") {
		t.Fatalf("runtime not named %q: %v", micproc.Name, err)
	}
}
