package mysqlsink_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/testenv"
	mysqlsink "github.com/hyapp/roomflow/sinks/mysql"
	"github.com/hyapp/roomflow/sinks/mysql/sinktest"
)

// giftTotals is a fact stream the engine has never heard of: records
// "event_id gift_id amount" add amount to test_gift_totals.total of the
// gift, once per event_id (test_gift_consumption). Gifts are spread over
// every partition, so partitions share rows (SharedRows).
type giftTotals struct{ topic string }

type gift struct {
	eventID, giftID string
	amount          int64
}

func (g giftTotals) Topic() string    { return g.topic }
func (g giftTotals) SharedRows() bool { return true }

func (g giftTotals) Decode(rec *kgo.Record) (gift, error) {
	f := strings.Fields(string(rec.Value))
	if len(f) != 3 {
		return gift{}, mysqlsink.Invalid("bad_gift", "%d fields, want 3", len(f))
	}
	n, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return gift{}, mysqlsink.Invalid("bad_gift", "amount: %v", err)
	}
	return gift{f[0], f[1], n}, nil
}

var giftConsumption = mysqlsink.Consumption[gift]{
	Table: "test_gift_consumption",
	Key:   func(g gift) mysqlsink.EventKey { return mysqlsink.EventKey{AppCode: "hyapp", EventID: g.eventID} },
	Head:  "INSERT INTO test_gift_consumption (app_code, event_id, created_at_ms) VALUES ",
	Row:   "('hyapp',?,?)",
	Args:  func(a []any, g gift, nowMs int64) []any { return append(a, g.eventID, nowMs) },
}

func (g giftTotals) Apply(ctx context.Context, tx *mysqlsink.Tx, gs []gift) (mysqlsink.Applied, error) {
	fresh, consumed, err := giftConsumption.Consume(ctx, tx, gs)
	if err != nil {
		return mysqlsink.Applied{}, err
	}
	err = tx.ExecRows(ctx, "INSERT INTO test_gift_totals (gift_id, total) VALUES ", "(?,?)", " ON DUPLICATE KEY UPDATE total = total + VALUES(total)",
		len(fresh), func(i int, a []any) []any { return append(a, fresh[i].giftID, fresh[i].amount) })
	return mysqlsink.Applied{Consumed: consumed, FactRows: map[string]int{"test_gift_totals": len(fresh)}}, err
}

// TestNewFactStreamIsOneApplier: a third topic with its own tables joins
// `roomflow sink` by one more mysqlsink.Register, and the engine gives it what it
// gives the mic ledger: facts exactly once across producer repeats, its
// undecodable records in the DLQ with the applier's reason and the
// partition moving on, offsets in roomflow_sink_offsets, metrics by its
// consumption table. The mic ledger next to it is applied as before.
func TestNewFactStreamIsOneApplier(t *testing.T) {
	e := newEnv(t, 3)
	ctx := context.Background()
	topic := e.ledgerTopic() + "-gift-totals"
	if _, err := e.adm.CreateTopic(ctx, 3, -1, nil, topic); err != nil {
		t.Fatal(err)
	}
	e.extraTopics = []string{topic}
	for _, ddl := range []string{
		"CREATE TABLE test_gift_consumption (app_code VARCHAR(32) NOT NULL, event_id VARCHAR(128) NOT NULL, created_at_ms BIGINT NOT NULL, PRIMARY KEY (app_code, event_id))",
		"CREATE TABLE test_gift_totals (gift_id VARCHAR(64) NOT NULL PRIMARY KEY, total BIGINT NOT NULL)",
	} {
		if _, err := e.m.DB.ExecContext(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}

	want := map[string]int64{}
	var recs []*kgo.Record
	for i := range 600 {
		id, g, n := fmt.Sprintf("gift-%d", i), fmt.Sprintf("g%d", i%7), int64(i%13+1)
		want[g] += n
		rec := &kgo.Record{Topic: topic, Key: []byte(id), Value: fmt.Appendf(nil, "%s %s %d", id, g, n)}
		recs = append(recs, rec)
		if i%10 == 0 { // a producer retry: the same record again, same partition
			recs = append(recs, &kgo.Record{Topic: topic, Key: rec.Key, Value: rec.Value})
		}
		if i%250 == 0 {
			recs = append(recs, &kgo.Record{Topic: topic, Key: rec.Key, Value: []byte("not a gift")})
		}
	}
	ledger := sinktest.NewLedgerGen(51, "hyapp", 50).Next(1000)
	o := sinktest.NewOracle()
	o.AddLedger(ledger...)
	recs = append(recs, sinktest.LedgerRecords(e.ledgerTopic(), ledger)...)
	if err := sinktest.Produce(ctx, e.k.Client(t), recs); err != nil {
		t.Fatal(err)
	}

	e.extraAppliers = []mysqlsink.Registration{mysqlsink.Register(giftTotals{topic})}
	r := e.start(t, e.cfg)
	e.waitCaughtUp(t, e.cfg.Group, 60*time.Second, r)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}

	got := map[string]int64{}
	rows, err := e.m.DB.QueryContext(ctx, "SELECT gift_id, total FROM test_gift_totals")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var g string
		var n int64
		if err := rows.Scan(&g, &n); err != nil {
			t.Fatal(err)
		}
		got[g] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("gift totals %v, want %v (each event once)", got, want)
	}
	if n := count(t, e.m.DB, "SELECT COUNT(*) FROM test_gift_consumption"); n != 600 {
		t.Fatalf("%d gift consumption rows, want 600", n)
	}
	m := r.sink.Metrics()
	if a, d := testenv.Total(m.Records.WithLabelValues("test_gift_consumption", "applied")), testenv.Total(m.Records.WithLabelValues("test_gift_consumption", "deduplicated")); a != 600 || d != 60 {
		t.Fatalf("records metric: %v applied, %v deduplicated; want 600 and 60", a, d)
	}
	dlq := e.k.DrainCommitted(t, e.cfg.DLQTopic)
	if len(dlq) != 3 {
		t.Fatalf("DLQ holds %d records, want the 3 bad gifts", len(dlq))
	}
	for _, d := range dlq {
		h := map[string]string{}
		for _, kv := range d.Headers {
			h[kv.Key] = string(kv.Value)
		}
		if h["error_reason"] != "bad_gift" || h["source_topic"] != topic || string(d.Value) != "not a gift" {
			t.Fatalf("dead letter %q headers %v, want reason bad_gift from %s", d.Value, h, topic)
		}
	}
	if err := o.Check(ctx, e.m.DB); err != nil {
		t.Fatal(err)
	}
}

// Every applier's config: the topic is required and the default app_code
// fits the app_code columns; each problem names its field.
func TestApplierConfigNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		key string
		cfg mysqlsink.ApplierConfig
	}{
		{"topic", mysqlsink.ApplierConfig{}},
		{"topic", mysqlsink.ApplierConfig{Topic: "no spaces"}},
		{"default_app_code", mysqlsink.ApplierConfig{Topic: "t", DefaultAppCode: strings.Repeat("a", mysqlsink.MaxAppCode+1)}},
	} {
		if keys := cfgerr.Keys(tc.cfg.Validate()); !slices.Equal(keys, []string{tc.key}) {
			t.Errorf("%+v: keys %v, want [%s]", tc.cfg, keys, tc.key)
		}
	}
	if err := (mysqlsink.ApplierConfig{Topic: "t", DefaultAppCode: "hyapp"}).Validate(); err != nil {
		t.Errorf("valid applier config: %v", err)
	}
}
