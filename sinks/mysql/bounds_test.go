package mysqlsink_test

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/schemas/envelope"
	"github.com/hyapp/roomflow/schemas/userv1"
	"github.com/hyapp/roomflow/sinks/mysql/sinktest"
)

// half is just over half of math.MaxInt64: two of them wrap an int64.
const half = math.MaxInt64/2 + 1

// deadLetter is what a test checks of one DLQ record: its headers.
type deadLetter map[string]string

// deadLetters drains the DLQ and returns each record's headers, in order.
func (e *env) deadLetters(t *testing.T) []deadLetter {
	t.Helper()
	var out []deadLetter
	for _, r := range e.k.DrainCommitted(t, e.cfg.DLQTopic) {
		h := deadLetter{}
		for _, kv := range r.Headers {
			h[kv.Key] = string(kv.Value)
		}
		out = append(out, h)
	}
	return out
}

// refused is a record the sink must dead-letter: its offset, and what the
// error header must name (the field, its value and the bound).
type refused struct {
	offset int
	names  []string
}

// checkRefused checks that the DLQ holds exactly want, in order, each
// with reason amount_out_of_range from topic.
func (e *env) checkRefused(t *testing.T, topic string, want []refused) {
	t.Helper()
	got := e.deadLetters(t)
	if len(got) != len(want) {
		t.Fatalf("DLQ holds %d records, want %d: %v", len(got), len(want), got)
	}
	for i, w := range want {
		h := got[i]
		if h["error_reason"] != "amount_out_of_range" || h["source_topic"] != topic || h["source_offset"] != strconv.Itoa(w.offset) {
			t.Errorf("DLQ record %d: %v, want reason amount_out_of_range at %s offset %d", i, h, topic, w.offset)
		}
		for _, n := range w.names {
			if !strings.Contains(h["error"], n) {
				t.Errorf("DLQ record %d: error %q does not name %q", i, h["error"], n)
			}
		}
	}
}

// TestInflowAmountsOverTheBound: inflows with an amount above
// envelope.MaxGiftCoins go to the DLQ with reason amount_out_of_range and
// an error naming the field, its value and the bound; the records around
// them still apply and the pools hold exactly the good inflows. Two of
// them (just over MaxInt64/2 each, one batch) used to wrap the platform
// row's sum in Go; one of MaxInt64 used to make the next inflow of its
// room fail with MySQL error 1690, which stopped the sink for good.
func TestInflowAmountsOverTheBound(t *testing.T) {
	e := newEnv(t, 1)
	e.cfg.BatchSize = 10
	ctx := context.Background()
	good := sinktest.NewInflowGen(51, appCode, 3, 2).Next(40)
	inflow := func(src string, mut func(*activityv1.LuckyPoolInflow)) *activityv1.LuckyPoolInflow {
		in := &activityv1.LuckyPoolInflow{EventId: "LuckyPoolInflow:" + src, AppCode: appCode, SourceEventId: src,
			RoomId: good[0].RoomId, GiftId: good[0].GiftId, RuleVersion: "v1", HeatValue: 100, PoolIn: 10, PlatformIn: 2, RoomIn: 3, GiftIn: 5,
			OccurredAtMs: good[0].OccurredAtMs}
		mut(in)
		return in
	}
	const over = envelope.MaxGiftCoins + 1
	ins := append([]*activityv1.LuckyPoolInflow(nil), good[:20]...)
	ins = append(ins,
		inflow("huge-1", func(in *activityv1.LuckyPoolInflow) { in.PlatformIn = half }),
		inflow("huge-2", func(in *activityv1.LuckyPoolInflow) { in.PlatformIn = half }))
	ins = append(ins, good[20:30]...)
	ins = append(ins,
		inflow("huge-3", func(in *activityv1.LuckyPoolInflow) { in.RoomId, in.RoomIn = "room-huge", math.MaxInt64 }),
		inflow("huge-4", func(in *activityv1.LuckyPoolInflow) { in.HeatValue = over }),
		inflow("huge-5", func(in *activityv1.LuckyPoolInflow) { in.GiftIn = over }))
	ins = append(ins, good[30:]...)
	// A valid inflow into huge-3's room, batches later.
	after := inflow("after", func(in *activityv1.LuckyPoolInflow) { in.RoomId = "room-huge" })
	ins = append(ins, after)
	o := sinktest.NewOracle()
	o.AddInflows(append(good, after)...)
	if err := sinktest.Produce(ctx, e.k.Client(t), sinktest.InflowRecords(e.inflowTopic(), ins)); err != nil {
		t.Fatal(err)
	}
	e.applyAll(t, o)
	bound := strconv.Itoa(envelope.MaxGiftCoins)
	e.checkRefused(t, e.inflowTopic(), []refused{
		{20, []string{"huge-1", "platform_in", strconv.FormatInt(half, 10), bound}},
		{21, []string{"huge-2", "platform_in", strconv.FormatInt(half, 10), bound}},
		{32, []string{"huge-3", "room_in", strconv.FormatInt(math.MaxInt64, 10), bound}},
		{33, []string{"huge-4", "heat_value", strconv.Itoa(over), bound}},
		{34, []string{"huge-5", "gift_in", strconv.Itoa(over), bound}},
	})
}

// TestInflowsAtTheBoundSumExactly: inflows of exactly envelope.MaxGiftCoins
// into the same pool rows, many to a batch and over several batches, are
// applied and summed exactly, in lucky_pools and lucky_pool_inflow_daily.
func TestInflowsAtTheBoundSumExactly(t *testing.T) {
	e := newEnv(t, 1)
	e.cfg.BatchSize = 7
	const n = 30
	var ins []*activityv1.LuckyPoolInflow
	for i := range n {
		ins = append(ins, &activityv1.LuckyPoolInflow{EventId: fmt.Sprintf("LuckyPoolInflow:max-%d", i), AppCode: appCode, SourceEventId: fmt.Sprintf("max-%d", i),
			RoomId: "room-max", GiftId: "gift-max", RuleVersion: "v1", HeatValue: envelope.MaxGiftCoins, PoolIn: envelope.MaxGiftCoins,
			PlatformIn: envelope.MaxGiftCoins, OccurredAtMs: 1772323200000 + int64(i)})
	}
	ins[1].PlatformIn, ins[1].RoomIn = 0, envelope.MaxGiftCoins
	o := e.produce(t, nil, ins)
	e.applyAll(t, o)
	if got := e.deadLetters(t); len(got) != 0 {
		t.Fatalf("%d dead letters, want none: %v", len(got), got)
	}
	if got := count(t, e.m.DB, "SELECT inflow FROM lucky_pool_inflow_daily WHERE scope_type = 'platform' AND scope_id = 'global'"); got != (n-1)*envelope.MaxGiftCoins {
		t.Fatalf("platform daily inflow %d, want %d", got, (n-1)*envelope.MaxGiftCoins)
	}
}

// ledgerEntry is a consumed ledger entry of user 9 with one daily delta
// and the lifetime delta of that day's session.
func ledgerEntry(id string, day *userv1.MicDailyDelta, life *userv1.MicLifetimeDelta) *userv1.MicLedgerEntry {
	return &userv1.MicLedgerEntry{EventId: id, AppCode: appCode, EventType: "RoomMicChanged", UserId: 9, MicSessionId: "s-" + id,
		Action: "down", Status: "consumed", OccurredAtMs: 1772323200000, Daily: []*userv1.MicDailyDelta{day}, Lifetime: life}
}

// TestMicLedgerAmountsOverTheBound: ledger entries whose durations or
// counts lie outside their bounds (a daily delta over one UTC day, a
// lifetime delta over envelope.MaxMicSessionMs, a count other than 0 or 1,
// a negative time) go to the DLQ with reason amount_out_of_range, naming
// the field, value and bound; the entries around them still apply. Two
// lifetime deltas just over MaxInt64/2 for one user used to wrap the
// lifetime row's sum.
func TestMicLedgerAmountsOverTheBound(t *testing.T) {
	e := newEnv(t, 1)
	ctx := context.Background()
	good := sinktest.NewLedgerGen(52, appCode, 10).Next(60)
	with := func(id string, mut func(d *userv1.MicDailyDelta, l *userv1.MicLifetimeDelta)) *userv1.MicLedgerEntry {
		d := &userv1.MicDailyDelta{StatDate: "2026-03-01", SeatOccupiedDeltaMs: 1000, MicOnlineDeltaMs: 500, SessionCountDelta: 1, RoomCountDelta: 1}
		l := &userv1.MicLifetimeDelta{SeatOccupiedDeltaMs: 1000, MicOnlineDeltaMs: 500, SessionCountDelta: 1}
		mut(d, l)
		return ledgerEntry(id, d, l)
	}
	es := append([]*userv1.MicLedgerEntry(nil), good[:30]...)
	es = append(es,
		with("wrap-1", func(_ *userv1.MicDailyDelta, l *userv1.MicLifetimeDelta) { l.SeatOccupiedDeltaMs = half }),
		with("wrap-2", func(_ *userv1.MicDailyDelta, l *userv1.MicLifetimeDelta) { l.SeatOccupiedDeltaMs = half }),
		with("day", func(d *userv1.MicDailyDelta, _ *userv1.MicLifetimeDelta) {
			d.MicOnlineDeltaMs = envelope.MaxMicDayMs + 1
		}),
		with("life", func(_ *userv1.MicDailyDelta, l *userv1.MicLifetimeDelta) {
			l.MicOnlineDeltaMs = envelope.MaxMicSessionMs + 1
		}),
		with("count", func(d *userv1.MicDailyDelta, _ *userv1.MicLifetimeDelta) { d.SessionCountDelta = 2 }),
		with("negative", func(d *userv1.MicDailyDelta, _ *userv1.MicLifetimeDelta) { d.SeatOccupiedDeltaMs = -1 }))
	es = append(es, good[30:]...)
	o := sinktest.NewOracle()
	o.AddLedger(good...)
	if err := sinktest.Produce(ctx, e.k.Client(t), sinktest.LedgerRecords(e.ledgerTopic(), es)); err != nil {
		t.Fatal(err)
	}
	e.applyAll(t, o)
	e.checkRefused(t, e.ledgerTopic(), []refused{
		{30, []string{"wrap-1", "lifetime.seat_occupied_delta_ms", strconv.FormatInt(half, 10), strconv.Itoa(envelope.MaxMicSessionMs)}},
		{31, []string{"wrap-2", "lifetime.seat_occupied_delta_ms"}},
		{32, []string{"daily.mic_online_delta_ms", strconv.Itoa(envelope.MaxMicDayMs + 1), strconv.Itoa(envelope.MaxMicDayMs)}},
		{33, []string{"lifetime.mic_online_delta_ms", strconv.Itoa(envelope.MaxMicSessionMs + 1)}},
		{34, []string{"daily.session_count_delta", "2"}},
		{35, []string{"daily.seat_occupied_delta_ms", "-1"}},
	})
}

// TestMicLedgerAtTheBoundsSumExactly: entries at exactly their bounds (a
// whole UTC day, a 400-day session, counts of 1) for one user, several in
// one batch, are applied and summed exactly.
func TestMicLedgerAtTheBoundsSumExactly(t *testing.T) {
	e := newEnv(t, 1)
	e.cfg.BatchSize = 4
	var es []*userv1.MicLedgerEntry
	for i := range 10 {
		es = append(es, ledgerEntry(fmt.Sprintf("max-%d", i),
			&userv1.MicDailyDelta{StatDate: "2026-03-01", SeatOccupiedDeltaMs: envelope.MaxMicDayMs, MicOnlineDeltaMs: envelope.MaxMicDayMs, SessionCountDelta: 1, RoomCountDelta: 1},
			&userv1.MicLifetimeDelta{SeatOccupiedDeltaMs: envelope.MaxMicSessionMs, MicOnlineDeltaMs: envelope.MaxMicSessionMs, SessionCountDelta: 1}))
	}
	o := e.produce(t, es, nil)
	e.applyAll(t, o)
	if got := e.deadLetters(t); len(got) != 0 {
		t.Fatalf("%d dead letters, want none: %v", len(got), got)
	}
	if got := count(t, e.m.DB, "SELECT seat_occupied_ms FROM user_mic_lifetime_stats WHERE user_id = 9"); got != 10*envelope.MaxMicSessionMs {
		t.Fatalf("lifetime seat time %d, want %d", got, 10*envelope.MaxMicSessionMs)
	}
}
