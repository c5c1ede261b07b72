package verify

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/processors/room/roomtest"
	"github.com/hyapp/roomflow/producers/relay"
	"github.com/hyapp/roomflow/schemas/envelope"
	"github.com/hyapp/roomflow/schemas/roomv1"
	"github.com/hyapp/roomflow/schemas/userv1"
)

// TestVerifyListsAbandonedIDs: verify lists the relay's gap_abandoned
// records (the format relay.Router.GapRecord writes) from the DLQ topic and
// ignores other dead letters.
// run is Run with idle, returning what it printed.
func run(t *testing.T, cfg *config.Config, idle time.Duration) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	err := Run(ctx, cfg, Options{Idle: idle}, &out)
	return out.String(), err
}

func TestVerifyListsAbandonedIDs(t *testing.T) {
	k := testenv.NewKafka(t)
	m := testenv.NewMySQL(t)
	router := relay.Router{DLQ: k.Config.Topics.DLQ}
	cl := k.Client(t)
	recs := []*kgo.Record{
		router.GapRecord(relay.Abandoned{From: 900, To: 904, Reason: relay.AbandonMaxOpenGaps, OpenFor: 2 * time.Second}),
		router.GapRecord(relay.Abandoned{From: 17, To: 17, Reason: relay.AbandonMaxAge, OpenFor: time.Hour}),
		{Topic: k.Config.Topics.DLQ, Key: []byte("r1"), Value: []byte{1}, Headers: []kgo.RecordHeader{{Key: "error_reason", Value: []byte("payload_too_large")}}},
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, testenv.Config(t, k, m), 2*time.Second)
	if err != nil {
		t.Fatalf("verify: %v\n%s", err, out)
	}
	for _, want := range []string{
		"abandoned outbox ids (the relay gave up waiting; a row committed later with one of these ids is relayed only in binlog mode on MariaDB: look its event_id up): 6 ids in 2 ranges\n",
		"   ids 17-17 (1, max_age, waited 1h0m0s)\n   ids 900-904 (5, max_open_gaps, waited 2s)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("verify output lacks %q:\n%s", want, out)
		}
	}
}

// TestVerifyReconcilesDraws: once roomflow lucky owns the pools, verify
// reconciles the lucky gifts of the log with lucky_draw_records by draw_id
// and checks the pool invariants (balance = funded + total_in - total_out
// instead of balance = total_in; total_in is every gift's inflow): a
// consistent state has no differences (a gift from before the ownership
// needs no draw, a rejected gift adds no inflow, whether its rejection
// claimed it first or took back what the sink had added); then a draw without its
// gift, a gift without its draw, a gift without a draw_id, a rejection
// without its gift and with its inflow in the pools, a draw with another
// inflow and a pool off its invariants are each reported.
func TestVerifyReconcilesDraws(t *testing.T) {
	k := testenv.NewKafka(t)
	m := testenv.NewMySQL(t)
	ctx := context.Background()
	roomtest.InsertRule(t, m.DB, roomtest.Rule("rose", "v1", 50000, 200000, 300000)) // heat 1000: 50 = 10 + 15 + 25
	// roomtest.Gift's occurred_at_ms is base + version: the gift of
	// version 0 comes before the ownership.
	const base = 1_767_225_600_000
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := m.DB.Exec(q, args...); err != nil {
			t.Fatal(err)
		}
	}
	exec("INSERT INTO lucky_pool_owner (id, owner, owned_at_ms) VALUES (1, 'lucky', ?)", base+1)
	draw := func(id, room string, roomIn, reward int64) {
		exec(`INSERT INTO lucky_draw_records (draw_id, app_code, command_id, room_id, sender_user_id, gift_id, rule_version,
			pool_in, platform_in, room_in, gift_in, candidate_tiers_json, selected_tier_id, reward_coins, random_digest,
			pool_snapshot_json, risk_snapshot_json, created_at_ms, updated_at_ms)
			VALUES (?, 'hyapp', ?, ?, 7, 'rose', 'v1', 50, 10, ?, 25, '[]', 'none', ?, 'x', '{}', '{}', 1, 1)`, id, "cmd-"+id, room, roomIn, reward)
	}
	draw("d1", "r1", 15, 30)
	draw("d3", "r1", 15, 0)
	// x2: an Execute rejected after the debit; its gift g2 names it, and
	// its inflow is claimed 'rejected', so it is in no pool.
	reject := func(id, claimedBy string) {
		exec(`INSERT INTO lucky_draw_records (draw_id, app_code, command_id, room_id, sender_user_id, gift_id, rule_version,
			candidate_tiers_json, selected_tier_id, random_digest, pool_snapshot_json, risk_snapshot_json, reward_status, reject_reason,
			created_at_ms, updated_at_ms) VALUES (?, 'hyapp', ?, 'r1', 7, 'rose', 'v1', '[]', '', '', '{}', '{}', 'rejected', 'global_disabled', 1, 1)`, id, "cmd-"+id)
		exec(`INSERT INTO lucky_pool_inflow_claims (app_code, draw_id, claimed_by, created_at_ms) VALUES ('hyapp', ?, ?, 1)`, id, claimedBy)
	}
	reject("x2", "rejected")
	// x6: rejected after the sink had added its gift g6's inflow, which
	// the rejection took back (finding 8): in no pool either.
	reject("x6", "reversed")
	// g0's inflow (before the ownership) came from the sink, g1's and g3's
	// from their draws: total_in is all three gifts' either way.
	exec(`INSERT INTO lucky_pools (app_code, scope_type, scope_id, balance, funded, total_in, total_out, reserve_floor) VALUES
		('hyapp', 'platform', 'global', 1000, 1000, 30, 30, 100), ('hyapp', 'room', 'r1', 45, 0, 45, 0, 0),
		('hyapp', 'gift', 'rose', 75, 0, 75, 0, 0)`)
	gift := func(id string, version int64, drawID string) *kgo.Record {
		return &kgo.Record{Topic: k.Config.Topics.RoomEvents, Key: []byte("r1"), Value: roomtest.Gift(id, "r1", version,
			&roomv1.RoomGiftSent{GiftId: "rose", Lucky: true, LuckyRuleVersion: "v1", HeatValue: 1000, GiftCount: 1, DrawId: drawID})}
	}
	cl := k.Client(t)
	if err := cl.ProduceSync(ctx, gift("g0", 0, ""), gift("g1", 1, "d1"), gift("g2", 2, "x2"), gift("g3", 3, "d3"), gift("g1", 1, "d1"), gift("g6", 6, "x6")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cfg := testenv.Config(t, k, m)
	out, err := run(t, cfg, time.Second)
	if err != nil || !strings.Contains(out, "reconciled 4 lucky gifts with 2 draws and 2 rejections (1 of them took back the inflow the sink had added) by draw_id, checked 3 pools") || !strings.Contains(out, ": 0 differences") {
		t.Fatalf("consistent state: %v\n%s", err, out)
	}

	draw("d9", "r1", 15, 0) // no gift names d9
	reject("x8", "stream")  // no gift names x8, and its inflow reached the pools
	exec("UPDATE lucky_draw_records SET room_in = 14 WHERE draw_id = 'd3'")
	exec("UPDATE lucky_pools SET balance = 50 WHERE scope_type = 'platform'")
	if err := cl.ProduceSync(ctx, gift("g4", 4, "d4"), gift("g5", 5, "")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	out, err = run(t, cfg, time.Second)
	if err == nil {
		t.Fatalf("verify passed with differences:\n%s", out)
	}
	for _, want := range []string{
		"lucky draw without a gift event[d9]",
		"lucky gift without its draw or rejection[g4]",
		"lucky rejection without a gift event[x8]",
		"lucky rejection's inflow claim[x8]: want rejected or reversed (its coins are refunded: no pool inflow), got stream",
		"lucky gift without a draw[g5]",
		"lucky_draw_records[d3]: want {RoomID:r1 GiftID:rose RuleVersion:v1 In:{Pool:50 Platform:10 Room:15 Gift:25}} (gift g3)",
		"lucky_pools.balance below reserve_floor[platform/global]: want >= 100, got 50",
		"lucky_pools.balance[platform/global]: want 1000, got 50",
		"lucky_pools.total_in[room/r1]: want 75, got 45", // g4 and g5 reached no pool
		": 11 differences",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("verify output lacks %q:\n%s", want, out)
		}
	}
}

// TestVerifyTotals: Totals compares each totals key's last record with
// the facts: equal ones pass, a stale lifetime or daily total, a lifetime
// row without a total and a total without a row are differences; a key
// of another app is not compared.
func TestVerifyTotals(t *testing.T) {
	k := testenv.NewKafka(t)
	m := testenv.NewMySQL(t)
	cfg := testenv.Config(t, k, m)
	ctx := context.Background()
	for _, q := range []string{
		"INSERT INTO user_mic_lifetime_stats (app_code, user_id, seat_occupied_ms, mic_online_ms, session_count, first_mic_at_ms, last_mic_at_ms, updated_at_ms) VALUES (?, 1, 100, 90, 2, 1000, 5000, 1), (?, 2, 50, 0, 1, 2000, 3000, 1), (?, 3, 10, 0, 1, 1, 2, 1)",
		"INSERT INTO user_mic_daily_stats (app_code, user_id, stat_date, seat_occupied_ms, mic_online_ms, session_count, room_count, first_mic_at_ms, last_mic_at_ms, updated_at_ms) VALUES (?, 1, '2026-12-01', 100, 90, 2, 1, 1000, 5000, 1), (?, 2, '2026-12-01', 50, 0, 1, 1, 2000, 3000, 1), (?, 3, '2026-12-01', 10, 0, 1, 1, 1, 2, 1)",
	} {
		if _, err := m.DB.ExecContext(ctx, q, cfg.AppCode, cfg.AppCode, cfg.AppCode); err != nil {
			t.Fatal(err)
		}
	}
	app := cfg.AppCode
	life := func(user, seat int64) *kgo.Record {
		v, _ := proto.Marshal(&userv1.UserMicLifetimeTotals{AppCode: app, UserId: user, SeatOccupiedMs: seat, MicOnlineMs: 90,
			SessionCount: 2, FirstMicAtMs: 1000, LastMicAtMs: 5000})
		return &kgo.Record{Topic: cfg.Kafka.Topics.MicLifetimeTotals, Key: []byte(fmt.Sprintf("%s:%d", app, user)), Value: v}
	}
	day := func(user, seat int64) *kgo.Record {
		v, _ := proto.Marshal(&userv1.UserMicDailyTotals{AppCode: app, UserId: user, StatDate: "2026-12-01", SeatOccupiedMs: seat,
			MicOnlineMs: 90, SessionCount: 2, RoomCount: 1, FirstMicAtMs: 1000, LastMicAtMs: 5000})
		return &kgo.Record{Topic: cfg.Kafka.Topics.MicDailyTotals, Key: []byte(fmt.Sprintf("%s:%d:2026-12-01", app, user)), Value: v}
	}
	other, _ := proto.Marshal(&userv1.UserMicLifetimeTotals{AppCode: "other", UserId: 1})
	recs := []*kgo.Record{life(1, 40), life(1, 100), life(2, 50), life(4, 1), day(1, 100), day(2, 49),
		{Topic: cfg.Kafka.Topics.MicLifetimeTotals, Key: []byte("other:1"), Value: other}}
	if err := k.Client(t).ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	rep, diffs, err := Totals(ctx, cfg, m.DB, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range diffs {
		got = append(got, d.Table+" "+d.Key)
	}
	slices.Sort(got)
	want := []string{
		"mic daily totals " + app + ":2:2026-12-01", // stale
		"mic lifetime totals " + app + ":2",         // differs from its row
		"mic lifetime totals " + app + ":3",         // a row without a total
		"mic lifetime totals " + app + ":4",         // a total without a row
	}
	if !slices.Equal(got, want) || rep.Lifetime != 3 || rep.Daily != 2 || rep.LifetimeRows != 3 {
		t.Fatalf("diffs %q (report %+v), want %q", got, rep, want)
	}
}

// TestVerifyTotalsFramed: in kafka.public_wire_format confluent the mic
// processor and the bootstrap frame the totals records; verify reads them
// per record like every reader, so equal totals are no difference.
func TestVerifyTotalsFramed(t *testing.T) {
	k := testenv.NewKafka(t)
	m := testenv.NewMySQL(t)
	cfg := testenv.Config(t, k, m)
	ctx := context.Background()
	app := cfg.AppCode
	for _, q := range []string{
		"INSERT INTO user_mic_lifetime_stats (app_code, user_id, seat_occupied_ms, mic_online_ms, session_count, first_mic_at_ms, last_mic_at_ms, updated_at_ms) VALUES (?, 1, 100, 90, 2, 1000, 5000, 1)",
		"INSERT INTO user_mic_daily_stats (app_code, user_id, stat_date, seat_occupied_ms, mic_online_ms, session_count, room_count, first_mic_at_ms, last_mic_at_ms, updated_at_ms) VALUES (?, 1, '2026-12-01', 100, 90, 2, 1, 1000, 5000, 1)",
	} {
		if _, err := m.DB.ExecContext(ctx, q, app); err != nil {
			t.Fatal(err)
		}
	}
	framed := func(topic, key string, msg proto.Message) *kgo.Record {
		f := envelope.Confluent(9, msg.ProtoReflect().Descriptor())
		v, _ := proto.MarshalOptions{}.MarshalAppend(slices.Clip(f.Prefix), msg)
		return &kgo.Record{Topic: topic, Key: []byte(key), Value: v,
			Headers: []kgo.RecordHeader{{Key: envelope.HeaderContentType, Value: f.Header()}}}
	}
	recs := []*kgo.Record{
		framed(cfg.Kafka.Topics.MicLifetimeTotals, app+":1", &userv1.UserMicLifetimeTotals{AppCode: app, UserId: 1, SeatOccupiedMs: 100,
			MicOnlineMs: 90, SessionCount: 2, FirstMicAtMs: 1000, LastMicAtMs: 5000}),
		framed(cfg.Kafka.Topics.MicDailyTotals, app+":1:2026-12-01", &userv1.UserMicDailyTotals{AppCode: app, UserId: 1, StatDate: "2026-12-01",
			SeatOccupiedMs: 100, MicOnlineMs: 90, SessionCount: 2, RoomCount: 1, FirstMicAtMs: 1000, LastMicAtMs: 5000}),
	}
	if err := k.Client(t).ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	rep, diffs, err := Totals(ctx, cfg, m.DB, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(diffs) != 0 || rep.Lifetime != 1 || rep.Daily != 1 {
		t.Fatalf("framed totals equal to the facts: diffs %+v (report %+v), want none", diffs, rep)
	}
}

// TestVerifyTotalsTombstone: a tombstone deletes its key from a totals
// topic (compaction removes the key's records), so verify compares the
// facts with no total for it, whether or not compaction ran yet.
func TestVerifyTotalsTombstone(t *testing.T) {
	k := testenv.NewKafka(t)
	m := testenv.NewMySQL(t)
	cfg := testenv.Config(t, k, m)
	ctx := context.Background()
	app := cfg.AppCode
	if _, err := m.DB.ExecContext(ctx, "INSERT INTO user_mic_lifetime_stats (app_code, user_id, seat_occupied_ms, mic_online_ms, session_count, first_mic_at_ms, last_mic_at_ms, updated_at_ms) VALUES (?, 1, 100, 90, 2, 1000, 5000, 1), (?, 2, 50, 0, 1, 2000, 3000, 1)", app, app); err != nil {
		t.Fatal(err)
	}
	life := func(user, seat, online, sessions, first, last int64) *kgo.Record {
		v, _ := proto.Marshal(&userv1.UserMicLifetimeTotals{AppCode: app, UserId: user, SeatOccupiedMs: seat, MicOnlineMs: online,
			SessionCount: sessions, FirstMicAtMs: first, LastMicAtMs: last})
		return &kgo.Record{Topic: cfg.Kafka.Topics.MicLifetimeTotals, Key: []byte(fmt.Sprintf("%s:%d", app, user)), Value: v}
	}
	tomb := &kgo.Record{Topic: cfg.Kafka.Topics.MicLifetimeTotals, Key: []byte(app + ":2")}
	if err := k.Client(t).ProduceSync(ctx, life(1, 100, 90, 2, 1000, 5000), life(2, 50, 0, 1, 2000, 3000), tomb).FirstErr(); err != nil {
		t.Fatal(err)
	}
	rep, diffs, err := Totals(ctx, cfg, m.DB, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(diffs) != 1 || diffs[0].Key != app+":2" || diffs[0].Got != "none" || rep.Lifetime != 1 {
		t.Fatalf("diffs %+v (report %+v), want the deleted key's row without a total", diffs, rep)
	}
}
