package luckystats_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/schemas/envelope"
	mysqlsink "github.com/hyapp/roomflow/sinks/mysql"
	"github.com/hyapp/roomflow/sinks/mysql/luckystats"
)

const app = "hyapp"

// hour is a UTC hour of the test data.
var hour = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC).UnixMilli()

// drawn is draw n of gift at minute n%60 past hour h, in room "r{n%3}": it
// spends 100 and pays reward (a hit when reward > 0).
func drawn(n int, gift, version string, h int64, reward int64) *activityv1.LuckyGiftDrawn {
	return &activityv1.LuckyGiftDrawn{
		EventId: fmt.Sprintf("LuckyGiftDrawn:d%d", n), AppCode: app, DrawId: fmt.Sprintf("d%d", n),
		RoomId: fmt.Sprintf("r%d", n%3), GiftId: gift, RuleVersion: version, CoinSpent: 100, RewardCoins: reward, Hit: reward > 0,
		TargetPayoutRatePpm: 950_000, DrawnAtMs: hour + h*luckystats.HourMs + int64(n%60)*60_000,
	}
}

// rejected is rejection n (command n, after a debit of coins) in room at
// minute n%60 past hour h.
func rejected(n int, room string, h, coins int64) *activityv1.LuckyDrawRejected {
	return &activityv1.LuckyDrawRejected{
		EventId: fmt.Sprintf("LuckyDrawRejected:x%d", n), AppCode: app, DrawId: fmt.Sprintf("x%d", n), CommandId: fmt.Sprintf("c%d", n),
		RoomId: room, GiftId: "rose", GiftCount: 1, CoinSpent: coins, Reason: "global_disabled", RuleVersion: "v1",
		SenderUserId: 7, CreatedAtMs: hour + h*luckystats.HourMs + int64(n%60)*60_000,
	}
}

// record is m as the lucky outbox worker publishes it: keyed by gift_id,
// with the standard headers.
func record(m interface {
	proto.Message
	GetEventId() string
	GetAppCode() string
}, giftID string) *kgo.Record {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	typ := string(m.ProtoReflect().Descriptor().Name())
	return &kgo.Record{Key: []byte(giftID), Value: b,
		Headers: envelope.AppendHeaders(nil, []byte(m.GetEventId()), []byte(typ), []byte(m.GetAppCode()))}
}

// framed is rec in the Confluent wire format (schema id 3), with the
// confluent content-type header or, withHeader false, none (detected by
// its leading 0).
func framed(rec *kgo.Record, withHeader bool) *kgo.Record {
	var msg activityv1.LuckyGiftDrawn
	f := envelope.Confluent(3, msg.ProtoReflect().Descriptor())
	out := &kgo.Record{Key: rec.Key, Value: append(append([]byte(nil), f.Prefix...), rec.Value...)}
	for _, h := range rec.Headers {
		if h.Key == envelope.HeaderContentType {
			if !withHeader {
				continue
			}
			h.Value = f.Header()
		}
		out.Headers = append(out.Headers, h)
	}
	return out
}

func TestDecode(t *testing.T) {
	a, err := luckystats.New(luckystats.Config{Topic: "lucky", DefaultAppCode: app})
	if err != nil {
		t.Fatal(err)
	}
	good := drawn(1, "rose", "v1", 0, 50)
	noApp := proto.Clone(good).(*activityv1.LuckyGiftDrawn)
	noApp.AppCode = ""
	// An Execute the draw service could not draw (luckydraw.RejectInvalidRequest):
	// a refund like any rejection, whatever its other fields hold.
	invalid := rejected(2, "r1", 0, 100)
	invalid.Reason, invalid.SenderUserId, invalid.TargetUserId, invalid.GiftCount, invalid.RuleVersion = "invalid_request", 0, -1, 0, ""
	for _, tc := range []struct {
		name   string
		rec    *kgo.Record
		reason string
	}{
		{"drawn", record(good, "rose"), ""},
		{"default app_code", record(noApp, "rose"), ""},
		// One topic with plain and framed records (a wire format switch):
		// each is read by its content-type, else its first byte.
		{"framed drawn", framed(record(good, "rose"), true), ""},
		{"framed drawn without content-type", framed(record(good, "rose"), false), ""},
		{"framing claimed, not held", &kgo.Record{Value: []byte{8, 1}, Headers: envelope.AppendHeadersAs(nil, nil, []byte("LuckyGiftDrawn"), nil,
			[]byte(envelope.ContentTypeConfluent))}, "decode"},
		{"reward granted", record(&activityv1.LuckyRewardGranted{EventId: "LuckyRewardGranted:r1", AppCode: app}, "rose"), ""},
		{"pool changed", record(&activityv1.LuckyPoolChanged{EventId: "LuckyPoolChanged:d1:gift", AppCode: app}, "rose"), ""},
		{"reward pending", record(&activityv1.LuckyRewardPending{EventId: "LuckyRewardPending:r1:0", AppCode: app}, "rose"), ""},
		{"risk rejected", record(&activityv1.LuckyRiskRejected{EventId: "LuckyRiskRejected:d1:user", AppCode: app}, "rose"), ""},
		{"draw rejected", record(rejected(1, "r1", 0, 100), "rose"), ""},
		{"draw rejected invalid_request", record(invalid, "rose"), ""},
		{"fairness committed", record(&activityv1.LuckyFairnessCommitted{EventId: "LuckyFairnessCommitted:hy:2026-12-08", AppCode: app,
			Day: "2026-12-08", Commitment: strings.Repeat("a", 64)}, app), ""},
		{"fairness revealed", record(&activityv1.LuckyFairnessRevealed{EventId: "LuckyFairnessRevealed:hy:2026-12-08", AppCode: app,
			Day: "2026-12-08", Seed: strings.Repeat("b", 64)}, app), ""},
		{"fairness without id", record(&activityv1.LuckyFairnessRevealed{AppCode: app, Day: "2026-12-08"}, app), "missing_event_id"},
		{"rejected without room", record(rejected(1, "", 0, 100), "rose"), "missing_room"},
		{"rejected room too long", record(rejected(1, strings.Repeat("r", 65), 0, 100), "rose"), "too_long"},
		{"rejected negative coins", record(rejected(1, "r1", 0, -5), "rose"), "negative_amount"},
		{"rejected coins at the bound", record(rejected(1, "r1", 0, envelope.MaxGiftCoins), "rose"), ""},
		{"rejected coins over the bound", record(rejected(1, "r1", 0, envelope.MaxGiftCoins+1), "rose"), envelope.ReasonAmountOutOfRange},
		{"drawn coins over the bound", record(&activityv1.LuckyGiftDrawn{EventId: "e", RoomId: "r", GiftId: "g", RuleVersion: "v", DrawnAtMs: 1,
			CoinSpent: math.MaxInt64}, "g"), envelope.ReasonAmountOutOfRange},
		{"rejected without time", record(&activityv1.LuckyDrawRejected{EventId: "e", RoomId: "r"}, "rose"), "bad_created_at"},
		{"no event_type", &kgo.Record{Value: []byte{}}, "unknown_event_type"},
		{"unknown type", &kgo.Record{Value: []byte{}, Headers: []kgo.RecordHeader{{Key: "event_type", Value: []byte("RoomGiftSent")}}}, "unknown_event_type"},
		{"garbage", &kgo.Record{Value: []byte{0xff, 0xff}, Headers: []kgo.RecordHeader{{Key: "event_type", Value: []byte("LuckyGiftDrawn")}}}, "decode"},
		{"no event id", record(&activityv1.LuckyGiftDrawn{AppCode: app, GiftId: "g", RuleVersion: "v", DrawnAtMs: 1}, "g"), "missing_event_id"},
		{"drawn without room", record(&activityv1.LuckyGiftDrawn{EventId: "e", GiftId: "g", RuleVersion: "v", DrawnAtMs: 1}, "g"), "missing_room"},
		{"no gift", record(&activityv1.LuckyGiftDrawn{EventId: "e", RuleVersion: "v", DrawnAtMs: 1}, "g"), "missing_gift"},
		{"negative reward", record(&activityv1.LuckyGiftDrawn{EventId: "e", GiftId: "g", RuleVersion: "v", DrawnAtMs: 1, RewardCoins: -1}, "g"), "negative_amount"},
		{"no drawn_at", record(&activityv1.LuckyGiftDrawn{EventId: "e", GiftId: "g", RuleVersion: "v"}, "g"), "bad_drawn_at"},
		{"gift too long", record(&activityv1.LuckyGiftDrawn{EventId: "e", GiftId: strings.Repeat("g", 65), RuleVersion: "v", DrawnAtMs: 1}, "g"), "too_long"},
		{"id too long", record(&activityv1.LuckyPoolChanged{EventId: strings.Repeat("e", 161)}, "g"), "too_long"},
		{"padded id", record(&activityv1.LuckyPoolChanged{EventId: "LuckyPoolChanged:d1:gift "}, "g"), "padded_id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := a.Decode(tc.rec)
			var ie *mysqlsink.InvalidRecordError
			if (tc.reason == "") != (err == nil) || (err != nil && (!errors.As(err, &ie) || ie.Reason != tc.reason)) {
				t.Fatalf("error %v, want reason %q", err, tc.reason)
			}
			if err == nil && (e.AppCode != app || e.EventID == "" || (e.Type == luckystats.TypeGiftDrawn) != (e.Drawn != nil) ||
				(e.Type == luckystats.TypeDrawRejected) != (e.Rejected != nil)) {
				t.Fatalf("decoded %+v", e)
			}
		})
	}
}

func TestBuildHourly(t *testing.T) {
	ev := func(d *activityv1.LuckyGiftDrawn) *luckystats.Event {
		return &luckystats.Event{EventKey: mysqlsink.EventKey{AppCode: d.AppCode, EventID: d.EventId}, Type: luckystats.TypeGiftDrawn, Drawn: d}
	}
	late := drawn(3, "rose", "v1", 0, 0)
	late.TargetPayoutRatePpm = 900_000 // newest in the hour wins
	rows, err := luckystats.BuildHourly([]*luckystats.Event{
		ev(drawn(1, "rose", "v1", 0, 500)), ev(late), ev(drawn(2, "rose", "v1", 1, 0)), ev(drawn(4, "castle", "v1", 0, 70)),
		{EventKey: mysqlsink.EventKey{AppCode: app, EventID: "x"}, Type: luckystats.TypeRewardGranted},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []luckystats.HourlyRow{
		{luckystats.HourlyKey{app, "castle", "v1", hour}, 1, 1, 100, 70, 950_000, hour + 4*60_000},
		{luckystats.HourlyKey{app, "rose", "v1", hour}, 2, 1, 200, 500, 900_000, hour + 3*60_000},
		{luckystats.HourlyKey{app, "rose", "v1", hour + luckystats.HourMs}, 1, 0, 100, 0, 950_000, hour + luckystats.HourMs + 2*60_000},
	}
	if fmt.Sprint(rows) != fmt.Sprint(want) {
		t.Fatalf("BuildHourly\n got %+v\nwant %+v", rows, want)
	}
}

func TestBuildRoomHourly(t *testing.T) {
	rows, err := luckystats.BuildRoomHourly([]*luckystats.Event{
		{EventKey: mysqlsink.EventKey{AppCode: app, EventID: "a"}, Type: luckystats.TypeGiftDrawn, Drawn: drawn(3, "rose", "v1", 0, 500)},  // r0
		{EventKey: mysqlsink.EventKey{AppCode: app, EventID: "b"}, Type: luckystats.TypeGiftDrawn, Drawn: drawn(6, "castle", "v2", 0, 0)},  // r0, another gift
		{EventKey: mysqlsink.EventKey{AppCode: app, EventID: "c"}, Type: luckystats.TypeGiftDrawn, Drawn: drawn(4, "rose", "v1", 1, 0)},    // r1, next hour
		{EventKey: mysqlsink.EventKey{AppCode: app, EventID: "d"}, Type: luckystats.TypeDrawRejected, Rejected: rejected(9, "r0", 0, 300)}, // r0
		{EventKey: mysqlsink.EventKey{AppCode: app, EventID: "e"}, Type: luckystats.TypeRewardGranted},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []luckystats.RoomHourlyRow{
		{luckystats.RoomHourlyKey{app, "r0", hour}, 2, 1, 200, 500, 1, 300, hour + 9*60_000},
		{luckystats.RoomHourlyKey{app, "r1", hour + luckystats.HourMs}, 1, 0, 100, 0, 0, 0, hour + luckystats.HourMs + 4*60_000},
	}
	if fmt.Sprint(rows) != fmt.Sprint(want) {
		t.Fatalf("BuildRoomHourly\n got %+v\nwant %+v", rows, want)
	}
}

// TestBuildOverflowIsAnError: a draw's reward has no amount bound (the
// pools bound what draws pay), so two rewards just over MaxInt64/2 in one
// room hour are an *mysqlsink.OverflowError naming the column, never a
// wrapped coins_out.
func TestBuildOverflowIsAnError(t *testing.T) {
	const half = math.MaxInt64/2 + 1
	var events []*luckystats.Event
	for n := range 2 {
		d := drawn(3*n, "rose", "v1", 0, half) // both in room r0, hour 0
		events = append(events, &luckystats.Event{EventKey: mysqlsink.EventKey{AppCode: app, EventID: d.EventId}, Type: luckystats.TypeGiftDrawn, Drawn: d})
	}
	var oe *mysqlsink.OverflowError
	if _, err := luckystats.BuildHourly(events); !errors.As(err, &oe) || oe.Column != "lucky_payout_stats_hourly.coins_out" || oe.Add != half {
		t.Errorf("BuildHourly: %v, want the coins_out overflow", err)
	}
	if _, err := luckystats.BuildRoomHourly(events); !errors.As(err, &oe) || oe.Column != "lucky_room_stats_hourly.coins_out" {
		t.Errorf("BuildRoomHourly: %v, want the coins_out overflow", err)
	}
}

// statsSink applies lucky event records through a real Store on one
// partition of the topic "lucky".
type statsSink struct {
	st   *mysqlsink.Store
	a    *luckystats.Applier
	tp   mysqlsink.TP
	gen  map[mysqlsink.TP]int64
	next int64
}

func newStatsSink(t *testing.T, db *sql.DB) *statsSink {
	t.Helper()
	a, err := luckystats.New(luckystats.Config{Topic: "lucky", DefaultAppCode: app})
	if err != nil {
		t.Fatal(err)
	}
	st, err := mysqlsink.NewStore(mysqlsink.StoreConfig{Group: "g", Appliers: []mysqlsink.Registration{mysqlsink.Register(a)}}, db)
	if err != nil {
		t.Fatal(err)
	}
	tp := mysqlsink.TP{Topic: "lucky"}
	c, err := st.Claim(context.Background(), "o", []mysqlsink.TP{tp}, 1)
	if err != nil {
		t.Fatal(err)
	}
	return &statsSink{st: st, a: a, tp: tp, gen: map[mysqlsink.TP]int64{tp: c[tp].Generation}}
}

// apply decodes recs as the engine does (an invalid one is a dead letter:
// no item, its offset still advances) and applies them as one batch.
func (s *statsSink) apply(t *testing.T, recs ...*kgo.Record) mysqlsink.Result {
	t.Helper()
	batch := make([]mysqlsink.Record, len(recs))
	for i, r := range recs {
		batch[i] = mysqlsink.Record{TP: s.tp, Offset: s.next + int64(i)}
		if e, err := s.a.Decode(r); err == nil {
			batch[i].Item = e
		}
	}
	res, err := s.st.Apply(context.Background(), "o", s.gen, batch, 1000)
	if err != nil {
		t.Fatal(err)
	}
	s.next += int64(len(recs))
	return res
}

func hourly(t *testing.T, db *sql.DB) string {
	t.Helper()
	rows, err := db.Query("SELECT gift_id, rule_version, hour_start_ms, draws, hits, coins_in, coins_out, target_payout_rate_ppm FROM lucky_payout_stats_hourly WHERE app_code = ? ORDER BY gift_id, rule_version, hour_start_ms", app)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var g, v string
		var h, d, hits, in, out, target int64
		if err := rows.Scan(&g, &v, &h, &d, &hits, &in, &out, &target); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s/%s@%d: %d %d %d %d %d\n", g, v, (h-hour)/luckystats.HourMs, d, hits, in, out, target)
	}
	return b.String()
}

// TestApplyDedupesAndIgnoresOtherTypes: draws become hourly facts once
// each, whatever the repeats (in a batch, across batches, after other
// event types); the other lucky events are recorded and add nothing; a bad
// record is skipped without stopping the batch.
func TestApplyDedupesAndIgnoresOtherTypes(t *testing.T) {
	m := testenv.NewMySQL(t)
	s := newStatsSink(t, m.DB)
	var recs []*kgo.Record
	for n := range 30 {
		reward := int64(0)
		if n%3 == 0 {
			reward = 300
		}
		recs = append(recs, record(drawn(n, "rose", "v1", int64(n%2), reward), "rose"))
	}
	recs = append(recs,
		record(drawn(100, "castle", "v2", 0, 40), "castle"),
		record(&activityv1.LuckyRewardGranted{EventId: "LuckyRewardGranted:r0", AppCode: app, RewardCoins: 300}, "rose"),
		record(&activityv1.LuckyPoolChanged{EventId: "LuckyPoolChanged:d0:gift", AppCode: app}, "rose"),
		&kgo.Record{Value: []byte{1}, Headers: []kgo.RecordHeader{{Key: "event_type", Value: []byte("Nope")}}},
		recs[0], // a repeat in the batch
	)
	res := s.apply(t, recs...)
	if got := res.Applied["lucky"].Consumed; got.Applied != 33 || got.Deduplicated != 1 {
		t.Fatalf("consumed %+v, want 33 applied, 1 deduplicated", got)
	}
	// rose: hour 0 has even n (0..28: 15 draws, hits n%6==0: 5), hour 1
	// odd n (15 draws, hits n%3==0 and odd: 3, 9, 15, 21, 27 = 5).
	want := "castle/v2@0: 1 1 100 40 950000\nrose/v1@0: 15 5 1500 1500 950000\nrose/v1@1: 15 5 1500 1500 950000\n"
	if got := hourly(t, m.DB); got != want {
		t.Fatalf("hourly facts\n got %s\nwant %s", got, want)
	}
	// Rooms r0, r1, r2 by n%3, so every hit (n%3 == 0) is r0's; the castle
	// draw (n=100, hour 0) is r1's.
	wantRooms := "r0@0: 5 5 500 1500 0 0 3000000\nr0@1: 5 5 500 1500 0 0 3000000\nr1@0: 6 1 600 40 0 0 66666\nr1@1: 5 0 500 0 0 0 0\nr2@0: 5 0 500 0 0 0 0\nr2@1: 5 0 500 0 0 0 0\n"
	if got := roomHourly(t, m.DB); got != wantRooms {
		t.Fatalf("room facts\n got %s\nwant %s", got, wantRooms)
	}
	if n := count(t, m.DB, "SELECT COUNT(*) FROM lucky_event_consumption WHERE event_type IN ('LuckyRewardGranted', 'LuckyPoolChanged')"); n != 2 {
		t.Fatalf("%d other lucky events recorded, want 2", n)
	}
	// Redelivered at new offsets (the outbox worker re-sends after a
	// crash between produce and done): nothing changes.
	res = s.apply(t, recs...)
	if got := res.Applied["lucky"].Consumed; got.Applied != 0 {
		t.Fatalf("replay applied %d events", got.Applied)
	}
	if got := hourly(t, m.DB); got != want {
		t.Fatalf("replay changed the hourly facts\n got %s\nwant %s", got, want)
	}
	if got := roomHourly(t, m.DB); got != wantRooms {
		t.Fatalf("replay changed the room facts\n got %s\nwant %s", got, wantRooms)
	}
}

func roomHourly(t *testing.T, db *sql.DB) string {
	t.Helper()
	rows, err := db.Query("SELECT room_id, hour_start_ms, draws, hits, coins_in, coins_out, rejections, rejected_coins, payout_ppm FROM lucky_room_stats_hourly WHERE app_code = ? ORDER BY room_id, hour_start_ms", app)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var r string
		var h, d, hits, in, out, rej, rejCoins, ppm int64
		if err := rows.Scan(&r, &h, &d, &hits, &in, &out, &rej, &rejCoins, &ppm); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s@%d: %d %d %d %d %d %d %d\n", r, (h-hour)/luckystats.HourMs, d, hits, in, out, rej, rejCoins, ppm)
	}
	return b.String()
}

// TestApplyRoomRejections: a rejection adds to its room hour's rejections
// and the coins to refund, not to its draws or coins in, once.
func TestApplyRoomRejections(t *testing.T) {
	m := testenv.NewMySQL(t)
	s := newStatsSink(t, m.DB)
	recs := []*kgo.Record{record(drawn(3, "rose", "v1", 0, 0), "rose"), record(rejected(1, "r0", 0, 250), "rose"), record(rejected(2, "r0", 0, 100), "rose")}
	s.apply(t, recs...)
	s.apply(t, recs...) // redelivered
	if got, want := roomHourly(t, m.DB), "r0@0: 1 0 100 0 2 350 0\n"; got != want {
		t.Fatalf("room facts\n got %s\nwant %s", got, want)
	}
	if got := hourly(t, m.DB); got != "rose/v1@0: 1 0 100 0 950000\n" {
		t.Fatalf("a rejection changed the payout facts: %s", got)
	}
}

func count(t *testing.T, db *sql.DB, q string) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRow(q).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPayoutCollector: the gauges sum the window's hours per gift and rule
// version, leave out older hours and other apps, and omit the rate of a
// version without coins in; a failing query counts an error and exposes
// no gauges instead of failing the scrape.
func TestPayoutCollector(t *testing.T) {
	m := testenv.NewMySQL(t)
	ins := func(appCode, gift, version string, h, draws, in, out, target int64) {
		t.Helper()
		if _, err := m.DB.Exec("INSERT INTO lucky_payout_stats_hourly (app_code, gift_id, rule_version, hour_start_ms, draws, hits, coins_in, coins_out, target_payout_rate_ppm) VALUES (?,?,?,?,?,0,?,?,?)",
			appCode, gift, version, hour+h*luckystats.HourMs, draws, in, out, target); err != nil {
			t.Fatal(err)
		}
	}
	ins(app, "rose", "v1", 0, 600, 60_000, 30_000, 950_000)  // current hour
	ins(app, "rose", "v1", -2, 500, 40_000, 42_000, 950_000) // inside a 3h window
	ins(app, "rose", "v1", -3, 9999, 1, 1_000_000, 950_000)  // outside it
	ins(app, "castle", "v1", -1, 7, 0, 0, 900_000)           // no coins in: no rate
	ins("other", "rose", "v1", 0, 1, 1, 1, 1)
	now := hour + 30*60_000
	c, err := luckystats.NewPayoutCollector(luckystats.PayoutCollectorConfig{AppCode: app, Window: 3 * time.Hour,
		Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return time.UnixMilli(now) }}, m.DB)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	for _, tc := range []struct {
		name, gift string
		want       float64
		ok         bool
	}{
		{"roomflow_lucky_draws", "rose", 1100, true},
		{"roomflow_lucky_payout_rate_ppm", "rose", 720_000, true}, // 72,000 / 100,000
		{"roomflow_lucky_target_payout_rate_ppm", "rose", 950_000, true},
		{"roomflow_lucky_draws", "castle", 7, true},
		{"roomflow_lucky_payout_rate_ppm", "castle", 0, false},
		{"roomflow_lucky_target_payout_rate_ppm", "castle", 900_000, true},
	} {
		got, ok := testenv.Metric(reg, tc.name, "app_code", app, "gift_id", tc.gift, "rule_version", "v1")
		if ok != tc.ok || got != tc.want {
			t.Fatalf("%s{gift_id=%s} = %v (present %v), want %v (present %v)", tc.name, tc.gift, got, ok, tc.want, tc.ok)
		}
	}
	if _, err := m.DB.Exec("DROP TABLE lucky_payout_stats_hourly"); err != nil {
		t.Fatal(err)
	}
	if _, ok := testenv.Metric(reg, "roomflow_lucky_draws"); ok {
		t.Fatal("gauges exposed although the query failed")
	}
	// One error per scrape: the one above and this one.
	if v, _ := testenv.Metric(reg, "roomflow_lucky_payout_stats_query_errors_total"); v != 2 {
		t.Fatalf("query errors %v, want 2", v)
	}
}

func TestPayoutCollectorConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  luckystats.PayoutCollectorConfig
		keys []string
	}{
		{luckystats.PayoutCollectorConfig{AppCode: app}, nil},
		{luckystats.PayoutCollectorConfig{}, []string{"app_code"}},
		{luckystats.PayoutCollectorConfig{AppCode: app, Window: 90 * time.Minute}, []string{"window"}},
		{luckystats.PayoutCollectorConfig{AppCode: app, QueryTimeout: -1}, []string{"query_timeout"}},
	} {
		err := tc.cfg.Validate()
		if got := cfgerr.Keys(err); fmt.Sprint(got) != fmt.Sprint(tc.keys) {
			t.Fatalf("%+v: keys %v (%v), want %v", tc.cfg, got, err, tc.keys)
		}
	}
}

// BenchmarkApply is one sink transaction of 1,000 new LuckyGiftDrawn
// events of 20 gifts in 200 rooms (the lucky events' batch on the hot
// path): run it against the commit before the room facts to see what
// they cost (docs/design.md, "The lucky draw service", room-level
// signals).
//
//	go test -run '^$' -bench BenchmarkApply -count 6 ./sinks/mysql/luckystats/
func BenchmarkApply(b *testing.B) {
	m := testenv.NewMySQL(b)
	a, err := luckystats.New(luckystats.Config{Topic: "lucky", DefaultAppCode: app})
	if err != nil {
		b.Fatal(err)
	}
	st, err := mysqlsink.NewStore(mysqlsink.StoreConfig{Group: "g", Appliers: []mysqlsink.Registration{mysqlsink.Register(a)}}, m.DB)
	if err != nil {
		b.Fatal(err)
	}
	tp := mysqlsink.TP{Topic: "lucky"}
	c, err := st.Claim(context.Background(), "o", []mysqlsink.TP{tp}, 1)
	if err != nil {
		b.Fatal(err)
	}
	gen := map[mysqlsink.TP]int64{tp: c[tp].Generation}
	const batch = 1000
	next := 0
	b.ResetTimer()
	for range b.N {
		recs := make([]mysqlsink.Record, batch)
		for i := range recs {
			d := drawn(next, fmt.Sprintf("g%d", next%20), "v1", int64(next/100_000), int64(next%7)*50)
			d.RoomId = fmt.Sprintf("room-%d", next%200)
			d.EventId = fmt.Sprintf("LuckyGiftDrawn:b%d", next)
			e, err := a.Decode(record(d, d.GiftId))
			if err != nil {
				b.Fatal(err)
			}
			recs[i] = mysqlsink.Record{TP: tp, Offset: int64(next), Item: e}
			next++
		}
		if _, err := st.Apply(context.Background(), "o", gen, recs, batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "events/s")
}

// TestApplyEventIDsDifferingOnlyInCase: two lucky events whose ids differ
// only in letter case are two events, each applied once (docs/reliability.md
// finding 12); under lucky_event_consumption's old case-insensitive
// collation the second's insert failed with a duplicate key, every retry.
func TestApplyEventIDsDifferingOnlyInCase(t *testing.T) {
	m := testenv.NewMySQL(t)
	s := newStatsSink(t, m.DB)
	lower, upper := drawn(1, "rose", "v1", 0, 0), drawn(2, "rose", "v1", 0, 0)
	lower.EventId, upper.EventId = "LuckyGiftDrawn:ld-ab", "LuckyGiftDrawn:LD-AB"
	res := s.apply(t, record(lower, "rose"), record(upper, "rose"))
	if got := res.Applied["lucky"].Consumed; got.Applied != 2 || got.Deduplicated != 0 {
		t.Fatalf("consumed %+v, want 2 applied", got)
	}
	res = s.apply(t, record(upper, "rose"), record(lower, "rose"))
	if got := res.Applied["lucky"].Consumed; got.Applied != 0 || got.Deduplicated != 2 {
		t.Fatalf("replay consumed %+v, want 2 deduplicated", got)
	}
	if got, want := hourly(t, m.DB), "rose/v1@0: 2 0 200 0 950000\n"; got != want {
		t.Fatalf("hourly facts\n got %s\nwant %s", got, want)
	}
}

// TestRoomPayoutPastBigint: a room hour whose coins_out × 10^6 passes
// BIGINT keeps taking writes, and payout_ppm is exact below BIGINT's top
// and clamped to it above. The virtual column computed it in BIGINT, so
// every later upsert of such a row failed with 1690, which stopped the
// lucky events topic of the sink (reward_coins has no per-record bound:
// rewards are bounded by the pools).
func TestRoomPayoutPastBigint(t *testing.T) {
	m := testenv.NewMySQL(t)
	s := newStatsSink(t, m.DB)
	// Draws 1 and 4 fall in room r1, 3 and 6 in r0, all in hour 0; each spends 100 coins.
	s.apply(t, record(drawn(1, "rose", "v1", 0, 9_300_000_000_000), "rose"))
	s.apply(t, record(drawn(4, "rose", "v1", 0, 0), "rose"))
	s.apply(t, record(drawn(3, "rose", "v1", 0, 4_000_000_000_000_000_000), "rose"))
	s.apply(t, record(drawn(6, "rose", "v1", 0, 1), "rose"))
	want := "r0@0: 2 2 200 4000000000000000001 0 0 9223372036854775807\n" + // 2·10^22 ppm, clamped
		"r1@0: 2 1 200 9300000000000 0 0 46500000000000000\n" // exact
	if got := roomHourly(t, m.DB); got != want {
		t.Fatalf("room facts\n got %s\nwant %s", got, want)
	}
}
