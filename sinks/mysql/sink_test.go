package mysqlsink_test

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/schemas/userv1"
	mysqlsink "github.com/hyapp/roomflow/sinks/mysql"
	"github.com/hyapp/roomflow/sinks/mysql/sinktest"
)

// TestReplayChangesNothing applies a ledger and inflow stream, then the
// same records appended a second time, then everything again from offset
// 0 under a new consumer group: after the first pass the tables equal the
// oracle, and neither replay changes a single byte.
func TestReplayChangesNothing(t *testing.T) {
	e := newEnv(t, 4)
	ctx := context.Background()
	gen := sinktest.NewLedgerGen(1, "hyapp", 300)
	gen.SkipPct = 0.05
	ledger := gen.Next(6000)
	inflows := sinktest.NewInflowGen(2, "hyapp", 20, 5).Next(2000)
	o := e.produce(t, ledger, inflows, kgo.ProducerLinger(0))

	r := e.start(t, e.cfg)
	e.waitCaughtUp(t, e.cfg.Group, 60*time.Second, r)
	if err := o.Check(ctx, e.m.DB); err != nil {
		t.Fatalf("first pass: %v", err)
	}
	first := dump(t, e.m.DB)
	t.Logf("first pass: %d consumption rows, %d sessions, %d daily rows, %d pools", count(t, e.m.DB, "SELECT COUNT(*) FROM user_mic_event_consumption"), count(t, e.m.DB, "SELECT COUNT(*) FROM user_mic_sessions"), count(t, e.m.DB, "SELECT COUNT(*) FROM user_mic_daily_stats"), count(t, e.m.DB, "SELECT COUNT(*) FROM lucky_pools"))

	// Second pass: the same records again, at new offsets.
	e.produce(t, ledger, inflows, kgo.ProducerLinger(0))
	e.waitCaughtUp(t, e.cfg.Group, 60*time.Second, r)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := dump(t, e.m.DB); got != first {
		t.Fatalf("second pass changed the tables")
	}

	// Third pass: a new group reads both copies from offset 0.
	cfg3 := e.cfg
	cfg3.Group = testenv.UniqueName(t) + "-third"
	r3 := e.start(t, cfg3)
	e.waitCaughtUp(t, cfg3.Group, 60*time.Second, r3)
	if err := r3.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := dump(t, e.m.DB); got != first {
		t.Fatalf("third pass from offset 0 with a new group changed the tables")
	}
	if err := o.Check(ctx, e.m.DB); err != nil {
		t.Fatalf("after replays: %v", err)
	}
}

// TestInvalidRecordsGoToDLQ: undecodable bytes and an entry without an
// event id are sent to the DLQ with their source position and never block
// the partition; the valid records around them are applied.
func TestInvalidRecordsGoToDLQ(t *testing.T) {
	e := newEnv(t, 1)
	ctx := context.Background()
	ledger := sinktest.NewLedgerGen(41, "hyapp", 20).Next(100)
	o := sinktest.NewOracle()
	o.AddLedger(ledger...)
	recs := sinktest.LedgerRecords(e.ledgerTopic(), ledger[:50])
	bad := sinktest.LedgerRecords(e.ledgerTopic(), []*userv1.MicLedgerEntry{{AppCode: "hyapp", Status: "consumed"}})[0]
	recs = append(recs, &kgo.Record{Topic: e.ledgerTopic(), Key: []byte("1"), Value: []byte{0xff, 0x01, 0x02}}, bad)
	recs = append(recs, sinktest.LedgerRecords(e.ledgerTopic(), ledger[50:])...)
	if err := sinktest.Produce(ctx, e.k.Client(t), recs); err != nil {
		t.Fatal(err)
	}
	e.applyAll(t, o)
	got := e.k.DrainCommitted(t, e.cfg.DLQTopic)
	if len(got) != 2 {
		t.Fatalf("DLQ holds %d records, want 2", len(got))
	}
	for i, want := range []struct{ reason, offset string }{{"decode", "50"}, {"missing_event_id", "51"}} {
		h := map[string]string{}
		for _, kv := range got[i].Headers {
			h[kv.Key] = string(kv.Value)
		}
		if h["error_reason"] != want.reason || h["source_offset"] != want.offset || h["source_topic"] != e.ledgerTopic() || h["error"] == "" {
			t.Fatalf("DLQ record %d headers %v, want reason %s at offset %s", i, h, want.reason, want.offset)
		}
	}
}

// TestEmptyAppCodeIsTheConfiguredOne: ledger entries and inflows without
// app_code belong to the configured app_code (the rule of every stage):
// they yield the facts of the same records naming it, and none goes to the
// DLQ (today's code dead-lettered them as missing_app_code).
func TestEmptyAppCodeIsTheConfiguredOne(t *testing.T) {
	e := newEnv(t, 1)
	ctx := context.Background()
	ledger := sinktest.NewLedgerGen(43, appCode, 20).Next(80)
	inflows := sinktest.NewInflowGen(43, appCode, 5, 5).Next(40)
	o := sinktest.NewOracle()
	o.AddLedger(ledger...)
	o.AddInflows(inflows...)
	for i, l := range ledger {
		if i%2 == 0 { // every other entry leaves app_code out, snapshot included
			l.AppCode = ""
			if l.Session != nil {
				l.Session.AppCode = ""
			}
		}
	}
	for i := range inflows {
		if i%2 == 0 {
			inflows[i].AppCode = ""
		}
	}
	recs := append(sinktest.LedgerRecords(e.ledgerTopic(), ledger), sinktest.InflowRecords(e.inflowTopic(), inflows)...)
	if err := sinktest.Produce(ctx, e.k.Client(t), recs); err != nil {
		t.Fatal(err)
	}
	r := e.start(t, e.cfg)
	e.waitCaughtUp(t, e.cfg.Group, 30*time.Second, r)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if err := o.Check(ctx, e.m.DB); err != nil {
		t.Fatal(err)
	}
	if got := e.k.DrainCommitted(t, e.cfg.DLQTopic); len(got) != 0 {
		t.Fatalf("DLQ holds %d records, want none", len(got))
	}
}

// A config that does not validate is refused at New, each problem named
// by its field (a batch size of 0 used to give a sink that polled nothing,
// in a busy loop; now 0 is the default and a negative one is refused).
// Zero fields take their defaults.
func TestNewRefusesInvalidConfig(t *testing.T) {
	st := newStore(t, nil, "g")
	valid := func() mysqlsink.Config {
		return mysqlsink.Config{Group: "g", Kafka: kafkax.Cluster{Brokers: []string{"127.0.0.1:9092"}}}
	}
	s, err := mysqlsink.New(valid(), st)
	if err != nil {
		t.Fatalf("New with defaults: %v", err)
	}
	if s.Owner() == "" {
		t.Fatal("no default owner id")
	}
	noGroup := valid()
	noGroup.Group = ""
	if _, err := mysqlsink.New(noGroup, st); err != nil {
		t.Fatalf("New without a group (the store's): %v", err)
	}
	for _, tc := range []struct {
		key string
		mut func(c *mysqlsink.Config)
	}{
		{"batch_size", func(c *mysqlsink.Config) { c.BatchSize = -1 }},
		{"flush_interval", func(c *mysqlsink.Config) { c.FlushInterval = -time.Second }},
		{"max_retries", func(c *mysqlsink.Config) { c.MaxRetries = -1 }},
		{"shutdown_timeout", func(c *mysqlsink.Config) { c.ShutdownTimeout = -time.Second }},
		{"parallelism", func(c *mysqlsink.Config) { c.Parallelism = -2 }},
		{"owner_id", func(c *mysqlsink.Config) { c.OwnerID = strings.Repeat("o", 129) }},
		{"kafka.brokers", func(c *mysqlsink.Config) { c.Kafka.Brokers = nil }},
		{"group", func(c *mysqlsink.Config) { c.Group = "another" }}, // not the store's
	} {
		c := valid()
		tc.mut(&c)
		if _, err := mysqlsink.New(c, st); !slices.Contains(cfgerr.Keys(err), tc.key) {
			t.Errorf("New with a bad %s: %v, want a %s field error", tc.key, err, tc.key)
		}
	}
}

// NewStore refuses a store it could not route records with: no applier at
// all, or two for one topic (kafka.topics.mic_ledger and lucky_pool_inflow
// naming the same topic would decode ledger entries as inflows).
func TestNewStoreRefusesStoreWithoutOneApplierPerTopic(t *testing.T) {
	if _, err := mysqlsink.NewStore(mysqlsink.StoreConfig{Group: "g"}, nil); !slices.Contains(cfgerr.Keys(err), "appliers") || !strings.Contains(err.Error(), "at least one applier") {
		t.Fatalf("NewStore without appliers: %v, want an appliers error", err)
	}
	if _, err := mysqlsink.NewStore(mysqlsink.StoreConfig{Group: "g", Appliers: []mysqlsink.Registration{{}}}, nil); !slices.Contains(cfgerr.Keys(err), "appliers") {
		t.Fatalf("NewStore with a zero Registration: %v, want an appliers error", err)
	}
	if _, err := mysqlsink.NewStore(mysqlsink.StoreConfig{Group: "g", Appliers: appliers(t, "same", "same")}, nil); !slices.Contains(cfgerr.Keys(err), "appliers") || !strings.Contains(err.Error(), "same") {
		t.Fatalf("NewStore with two appliers for one topic: %v, want an error naming the topic", err)
	}
	st, err := mysqlsink.NewStore(mysqlsink.StoreConfig{Appliers: appliers(t, "ledger", "inflow")}, nil)
	if err != nil || st.Group() != mysqlsink.DefaultGroup {
		t.Fatalf("NewStore without a group: %v, group %q; want the default group", err, st.Group())
	}
}

// TestDeadLetterRepeatsWithSameCoordinates pins the documented DLQ rule:
// the sink produces dead letters outside its MySQL transaction, so a
// record dead-lettered by a batch that then never commits (a crash, a
// fence) is dead-lettered again by the next owner, with the same key,
// value and headers, source_topic/source_partition/source_offset
// included: DLQ consumers dedupe by those coordinates. The facts still
// apply exactly once.
func TestDeadLetterRepeatsWithSameCoordinates(t *testing.T) {
	e := newEnv(t, 1)
	ctx := context.Background()
	ledger := sinktest.NewLedgerGen(43, "hyapp", 20).Next(40)
	o := sinktest.NewOracle()
	o.AddLedger(ledger...)
	recs := sinktest.LedgerRecords(e.ledgerTopic(), ledger[:20])
	recs = append(recs, &kgo.Record{Topic: e.ledgerTopic(), Key: []byte("7"), Value: []byte{0xff, 0x07}})
	recs = append(recs, sinktest.LedgerRecords(e.ledgerTopic(), ledger[20:])...)
	if err := sinktest.Produce(ctx, e.k.Client(t), recs); err != nil {
		t.Fatal(err)
	}
	// The first owner dead-letters the record, then dies before its MySQL
	// commit.
	cfg := e.cfg
	cfg.Hooks.InTxn = func(context.Context) error { return errKilled }
	crashed := e.start(t, cfg)
	select {
	case err := <-crashed.done:
		if !errors.Is(err, errKilled) {
			t.Fatalf("first owner: %v, want the kill", err)
		}
		crashed.cancel = nil
	case <-time.After(60 * time.Second):
		t.Fatal("the first owner never reached its transaction")
	}
	if n := count(t, e.m.DB, "SELECT COUNT(*) FROM user_mic_event_consumption"); n != 0 {
		t.Fatalf("the crashed batch left %d consumption rows", n)
	}
	r := e.start(t, e.cfg)
	e.waitCaughtUp(t, e.cfg.Group, 30*time.Second, r)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if err := o.Check(ctx, e.m.DB); err != nil {
		t.Fatal(err)
	}
	got := e.k.DrainCommitted(t, e.cfg.DLQTopic)
	if len(got) != 2 {
		t.Fatalf("DLQ holds %d records, want the dead letter twice", len(got))
	}
	headers := func(r *kgo.Record) map[string]string {
		h := map[string]string{}
		for _, kv := range r.Headers {
			h[kv.Key] = string(kv.Value)
		}
		return h
	}
	a, b := headers(got[0]), headers(got[1])
	if !maps.Equal(a, b) || string(got[0].Key) != string(got[1].Key) || !bytes.Equal(got[0].Value, got[1].Value) {
		t.Fatalf("the repeated dead letter differs:\n%v\n%v", a, b)
	}
	if a["source_topic"] != e.ledgerTopic() || a["source_partition"] != "0" || a["source_offset"] != "20" {
		t.Fatalf("dead letter coordinates %v, want %s/0@20", a, e.ledgerTopic())
	}
}
