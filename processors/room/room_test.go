package room_test

import (
	"context"
	"fmt"
	"math/big"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/domain/lucky"
	"github.com/hyapp/roomflow/domain/lucky/rulestore"
	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/processors/room"
	"github.com/hyapp/roomflow/processors/room/roomtest"
	"github.com/hyapp/roomflow/processors/streams"
	"github.com/hyapp/roomflow/processors/streams/rttest"
	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/schemas/envelope"
	"github.com/hyapp/roomflow/schemas/roomv1"
)

type env struct {
	t      *testing.T
	k      *testenv.Kafka
	m      *testenv.MySQL
	cfg    room.Config
	rules  *rulestore.Loader
	topics topics
}

// topics are the test's topic names.
type topics struct{ RoomEvents, UserMicEvents, LuckyPoolInflow, DLQ string }

func newEnv(t *testing.T) *env {
	return newEnvOn(t, testenv.NewKafka(t))
}

// newMemEnv is an env without Kafka, for behaviour tests on the in-memory
// driver (drive): the lucky rules still come from MySQL.
func newMemEnv(t *testing.T) *env { return newEnvOn(t, nil) }

func newEnvOn(t *testing.T, k *testenv.Kafka) *env {
	m := testenv.NewMySQL(t)
	cfg := testConfig(t, k)
	rules, err := rulestore.New(rulestore.Config{CacheSize: 100}, m.DB)
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, k: k, m: m, cfg: cfg, rules: rules,
		topics: topics{RoomEvents: cfg.Runtime.Input, UserMicEvents: cfg.MicTopic, LuckyPoolInflow: cfg.InflowTopic, DLQ: cfg.Runtime.DLQ}}
}

// testConfig is the room processor's config on k (nil: the default topic
// names and no brokers, for the in-memory driver), in a group of its own.
func testConfig(t *testing.T, k *testenv.Kafka) room.Config {
	c := testenv.Config(t, k, nil)
	tp := c.Kafka.Topics
	var kafka kafkax.Cluster
	if k != nil {
		kafka = k.Cluster()
	}
	return room.Config{
		Runtime: streams.Config{Input: tp.RoomEvents, Group: testenv.UniqueName(t) + "-room", DLQ: tp.DLQ, Kafka: kafka,
			CommitInterval: 50 * time.Millisecond},
		MicTopic:    tp.UserMicEvents,
		InflowTopic: tp.LuckyPoolInflow,
		AppCode:     c.AppCode,
	}
}

// fast is c for instance txnID with takeovers made fast for tests.
func fast(c room.Config, txnID string) room.Config {
	r := &c.Runtime
	r.TransactionalID = txnID
	r.Kafka.Extra = append(slices.Clip(r.Kafka.Extra), kgo.RebalanceTimeout(5*time.Second))
	r.Kafka.SessionTimeout = 6 * time.Second
	r.RetryBackoffMin, r.RetryBackoffMax = 20*time.Millisecond, 200*time.Millisecond
	r.LagInterval = -1
	return c
}

// drive runs the room processor on recs in memory (rttest.Driver): what
// it would commit and dead-letter, without a broker.
func (e *env) drive(recs []*kgo.Record) *rttest.Driver {
	e.t.Helper()
	d := rttest.NewDriver(e.t, rttest.DriverConfig{Input: e.topics.RoomEvents}, room.NewProcessor(e.cfg, e.rules))
	d.MustFeed(recs...)
	return d
}

func (e *env) produce(recs []*kgo.Record) { rttest.Produce(e.t, e.k.Client(e.t), recs) }

func (e *env) read(topic string, want int) []*kgo.Record {
	return rttest.ReadCommitted(e.t, e.k.Brokers, topic, want, time.Second, 90*time.Second)
}

// TestRepartitionMicEvents: 20k mic events over 200 rooms and 1,000 users
// arrive in the user topic exactly once, unchanged, keyed by user_id, each
// user in one partition, each session in order. Other event types pass by.
func TestRepartitionMicEvents(t *testing.T) {
	e := newMemEnv(t)
	w := roomtest.Mic(20000, 200, 1000, 42)
	recs := w.Records(e.topics.RoomEvents)
	// Pass-by traffic interleaved: joins and non-lucky gifts produce nothing.
	for i := range 500 {
		roomID := "room-" + strconv.Itoa(1+i%200)
		v := roomtest.Envelope(fmt.Sprintf("evt-join-%d", i), "RoomUserJoined", roomID, 0, 0, &roomv1.RoomUserJoined{UserId: int64(i)})
		if i%2 == 1 {
			v = roomtest.Gift(fmt.Sprintf("evt-gift-%d", i), roomID, 0, &roomv1.RoomGiftSent{GiftId: "rose", HeatValue: 100})
		}
		pos := i * len(recs) / 500
		recs = slices.Insert(recs, pos, &kgo.Record{Topic: e.topics.RoomEvents, Key: []byte(roomID), Value: v})
	}
	d := e.drive(recs)
	out := d.Output(e.topics.UserMicEvents)

	byID := map[string]roomtest.MicEvent{}
	for _, ev := range w.Events {
		byID[ev.EventID] = ev
	}
	seen := map[string]bool{}
	users := map[string]bool{}
	order := map[string][]string{} // session -> event ids in output order
	for _, rec := range out {
		id := rttest.Header(rec, "event_id")
		ev, ok := byID[id]
		if !ok {
			t.Fatalf("unexpected output event %q", id)
		}
		if seen[id] {
			t.Fatalf("event %s emitted twice", id)
		}
		seen[id] = true
		if string(rec.Key) != strconv.FormatInt(ev.UserID, 10) {
			t.Fatalf("event %s keyed %q, want user %d", id, rec.Key, ev.UserID)
		}
		if !slices.Equal(rec.Value, ev.Value) {
			t.Fatalf("event %s value changed", id)
		}
		if rttest.Header(rec, "event_type") != "RoomMicChanged" || rttest.Header(rec, "app_code") != roomtest.AppCode ||
			rttest.Header(rec, "content-type") != "application/x-protobuf" {
			t.Fatalf("event %s headers %v", id, rec.Headers)
		}
		users[string(rec.Key)] = true
		order[ev.SessionID] = append(order[ev.SessionID], id)
	}
	if len(seen) != len(w.Events) || len(out) != len(w.Events) {
		t.Fatalf("%d outputs (%d distinct), want %d", len(out), len(seen), len(w.Events))
	}
	for sid, want := range w.Sessions {
		if !slices.Equal(order[sid], want) {
			t.Fatalf("session %s out of order: got %v want %v", sid, order[sid], want)
		}
	}
	if len(users) < 900 {
		t.Fatalf("only %d users seen; the workload should cover most of 1000", len(users))
	}
	if n := len(d.Output(e.topics.LuckyPoolInflow)); n != 0 {
		t.Fatalf("%d inflow records from non-lucky traffic", n)
	}
	if n := len(d.DeadLetters()); n != 0 {
		t.Fatalf("%d DLQ records from valid traffic", n)
	}
}

// floorPPM is the test's own oracle for LUCKY-4: floor(x*ppm/1e6) in
// arbitrary precision.
func floorPPM(x, ppm int64) int64 {
	p := new(big.Int).Mul(big.NewInt(x), big.NewInt(ppm))
	return p.Quo(p, big.NewInt(1_000_000)).Int64()
}

type luckyCase struct {
	eventID, roomID, gift, version string
	heat                           int64
	drawID                         string // RoomGiftSent.draw_id, passed through to the inflow
}

func expectInflow(c luckyCase, r *lucky.Rule) *activityv1.LuckyPoolInflow {
	pool := floorPPM(c.heat, r.PoolRatePPM)
	pl, rm := floorPPM(pool, r.PlatformWeightPPM), floorPPM(pool, r.RoomWeightPPM)
	return &activityv1.LuckyPoolInflow{EventId: "LuckyPoolInflow:" + c.eventID, AppCode: roomtest.AppCode, RoomId: c.roomID,
		GiftId: c.gift, RuleVersion: c.version, HeatValue: c.heat, PoolIn: pool, PlatformIn: pl, RoomIn: rm,
		GiftIn: pool - pl - rm, SourceEventId: c.eventID, DrawId: c.drawID}
}

func luckyRecord(topic string, c luckyCase, version int64) *kgo.Record {
	v := roomtest.Gift(c.eventID, c.roomID, version, &roomv1.RoomGiftSent{GiftId: c.gift, HeatValue: c.heat, Lucky: true,
		LuckyRuleVersion: c.version, GiftCount: 1, SenderUserId: 7, TargetUserId: 8, DrawId: c.drawID})
	return &kgo.Record{Topic: topic, Key: []byte(c.roomID), Value: v}
}

// checkInflow asserts out holds exactly the expected inflows, once each.
func checkInflow(t *testing.T, out []*kgo.Record, want map[string]*activityv1.LuckyPoolInflow) {
	t.Helper()
	seen := map[string]bool{}
	for _, rec := range out {
		var got activityv1.LuckyPoolInflow
		if err := proto.Unmarshal(rec.Value, &got); err != nil {
			t.Fatal(err)
		}
		exp, ok := want[got.EventId]
		if !ok || seen[got.EventId] {
			t.Fatalf("unexpected or repeated inflow %s", got.EventId)
		}
		seen[got.EventId] = true
		exp.OccurredAtMs = got.OccurredAtMs // envelope time, checked below
		if !proto.Equal(&got, exp) || got.OccurredAtMs == 0 {
			t.Fatalf("inflow %s:\n got %v\nwant %v", got.EventId, &got, exp)
		}
		if string(rec.Key) != got.RoomId || rttest.Header(rec, "event_id") != got.EventId ||
			rttest.Header(rec, "event_type") != "LuckyPoolInflow" || rttest.Header(rec, "app_code") != roomtest.AppCode {
			t.Fatalf("inflow %s key %q headers %v", got.EventId, rec.Key, rec.Headers)
		}
	}
	if len(seen) != len(want) {
		t.Fatalf("%d inflows, want %d", len(seen), len(want))
	}
}

// TestLuckyPoolInflow: lucky gifts produce LUCKY-4's inflow with the
// rule version they name (two versions of one gift differ), keyed by room,
// carrying the gift's draw_id (empty when it has none).
func TestLuckyPoolInflow(t *testing.T) {
	e := newMemEnv(t)
	rules := map[string]*lucky.Rule{
		"rose/v1":   roomtest.Rule("rose", "v1", 50000, 200000, 300000),
		"rose/v2":   roomtest.Rule("rose", "v2", 80000, 100000, 100000),
		"castle/v1": roomtest.Rule("castle", "v1", 1_000_000, 333333, 333333),
		"zero/v1":   roomtest.Rule("zero", "v1", 0, 200000, 300000),
	}
	for _, r := range rules {
		roomtest.InsertRule(t, e.m.DB, r)
	}
	rng := rand.New(rand.NewPCG(9, 9))
	want := map[string]*activityv1.LuckyPoolInflow{}
	var recs []*kgo.Record
	keys := []string{"rose/v1", "rose/v2", "castle/v1", "zero/v1"}
	for i := range 400 {
		rk := keys[i%len(keys)]
		r := rules[rk]
		heat := rng.Int64N(1_000_000)
		switch i % 7 {
		case 0:
			heat = 0
		case 1:
			heat = envelope.MaxGiftCoins
		case 2:
			heat = 1 + rng.Int64N(30)
		}
		c := luckyCase{eventID: fmt.Sprintf("evt-lucky-%d", i), roomID: "room-" + strconv.Itoa(i%13), gift: r.GiftID, version: r.RuleVersion, heat: heat}
		if i%3 != 0 { // gifts with and without a draw (the draw service is optional)
			c.drawID = fmt.Sprintf("draw-%d", i)
		}
		want["LuckyPoolInflow:"+c.eventID] = expectInflow(c, r)
		recs = append(recs, luckyRecord(e.topics.RoomEvents, c, int64(i+1)))
	}
	checkInflow(t, e.drive(recs).Output(e.topics.LuckyPoolInflow), want)
}

// TestDLQCases: garbage bytes, an unknown event_type, a truncated
// protobuf, an unknown rule version, a negative heat, a heat above
// envelope.MaxGiftCoins, an invalid rule and ids ending in a space each
// are rejected with their reason (the DLQ record and its headers are the
// runtime's: TestRejectGoesToDLQAndPartitionMovesOn there), while the
// good records after each of them still flow (all in one partition).
func TestDLQCases(t *testing.T) {
	e := newMemEnv(t)
	roomtest.InsertRule(t, e.m.DB, roomtest.Rule("rose", "v1", 50000, 200000, 300000))
	broken := roomtest.Rule("rose", "broken", 50000, 200000, 300000)
	broken.Tiers[0].ProbabilityPPM-- // tiers sum to 999,999
	roomtest.InsertRule(t, e.m.DB, broken)

	const roomID = "room-dlq"
	mic := func(i int) []byte {
		return roomtest.Envelope(fmt.Sprintf("evt-good-%d", i), "RoomMicChanged", roomID, int64(i), 1,
			&roomv1.RoomMicChanged{UserId: int64(100 + i), Action: "up", MicSessionId: fmt.Sprintf("s-%d", i)})
	}
	garbage := []byte{0xff, 0xff, 0xff, 0xff}
	truncated := mic(99)
	truncated = truncated[:len(truncated)-3]
	for _, b := range [][]byte{garbage, truncated} {
		if proto.Unmarshal(b, &roomv1.EventEnvelope{}) == nil {
			t.Fatalf("precondition: %x decodes", b)
		}
	}
	gift := func(id, version string, heat int64) []byte {
		return roomtest.Gift(id, roomID, 1, &roomv1.RoomGiftSent{GiftId: "rose", Lucky: true, LuckyRuleVersion: version, HeatValue: heat})
	}
	type in struct {
		value  []byte
		reason string // "" = good
	}
	inputs := []in{
		{mic(0), ""},
		{garbage, room.ReasonDecodeEnvelope},
		{mic(1), ""},
		{roomtest.Envelope("evt-unknown", "RoomTeleported", roomID, 1, 1, nil), room.ReasonUnknownEventType},
		{mic(2), ""},
		{truncated, room.ReasonDecodeEnvelope},
		{mic(3), ""},
		{gift("evt-norule", "v404", 1000), room.ReasonUnknownRuleVersion},
		{gift("evt-lucky-ok", "v1", 1000), ""},
		{gift("evt-negative", "v1", -5), room.ReasonNegativeHeat},
		{gift("evt-huge", "v1", envelope.MaxGiftCoins+1), envelope.ReasonAmountOutOfRange},
		{gift("evt-lucky-max", "v1", envelope.MaxGiftCoins), ""},
		{gift("evt-broken", "broken", 1000), room.ReasonInvalidRule},
		{roomtest.Envelope("evt-badmic", "RoomMicChanged", roomID, 1, 1, nil), ""}, // empty payload decodes: user 0 goes on to the mic processor
		{mic(4), ""},
	}
	inputs = append(inputs, in{roomtest.Envelope(strings.Repeat("x", 129), "RoomMicChanged", roomID, 1, 1, nil), room.ReasonInvalidEnvelope}, in{mic(6), ""})
	// Ids that key byte-exact columns padding trailing spaces downstream.
	inputs = append(inputs, in{roomtest.Envelope("evt-padded ", "RoomMicChanged", roomID, 1, 1, nil), envelope.ReasonPaddedID},
		in{roomtest.Gift("evt-padded-draw", roomID, 1, &roomv1.RoomGiftSent{GiftId: "rose", Lucky: true, LuckyRuleVersion: "v1", HeatValue: 1000, DrawId: "LD-1 "}), envelope.ReasonPaddedID},
		in{roomtest.Gift("evt-padded-gift", roomID, 1, &roomv1.RoomGiftSent{GiftId: "rose ", Lucky: true, LuckyRuleVersion: "v1", HeatValue: 1000}), envelope.ReasonPaddedID},
		in{roomtest.Gift("evt-padded-room", roomID+" ", 1, &roomv1.RoomGiftSent{GiftId: "rose", Lucky: true, LuckyRuleVersion: "v1", HeatValue: 1000}), envelope.ReasonPaddedID},
		in{mic(7), ""})
	// A payload that does not decode as its event_type.
	badPayload, _ := proto.Marshal(&roomv1.EventEnvelope{EventId: "evt-badpayload", EventType: "RoomMicChanged", RoomId: roomID, Payload: []byte{0x0a}})
	inputs = append(inputs, in{badPayload, room.ReasonDecodePayload}, in{mic(5), ""})
	var recs []*kgo.Record
	var wantReasons []string
	for _, i := range inputs {
		recs = append(recs, &kgo.Record{Topic: e.topics.RoomEvents, Key: []byte(roomID), Value: i.value,
			Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("t1")}}})
		if i.reason != "" {
			wantReasons = append(wantReasons, i.reason)
		}
	}
	d := e.drive(recs)
	dlq, mics, inflow := d.DeadLetters(), d.Output(e.topics.UserMicEvents), d.Output(e.topics.LuckyPoolInflow)

	if len(dlq) != len(wantReasons) {
		t.Fatalf("%d DLQ records, want %d", len(dlq), len(wantReasons))
	}
	for i, dl := range dlq {
		if dl.Reason != wantReasons[i] || dl.Err == nil {
			t.Errorf("DLQ[%d] reason %q (%v), want %q", i, dl.Reason, dl.Err, wantReasons[i])
		}
		if off := dl.Record.Offset; !slices.Equal(dl.Record.Value, recs[off].Value) || string(dl.Record.Key) != roomID {
			t.Errorf("DLQ[%d] is not the original record at offset %d", i, off)
		}
	}
	if len(mics) != 9 {
		t.Fatalf("%d mic events passed, want 9 (8 good + the user-0 one)", len(mics))
	}
	if len(inflow) != 2 || rttest.Header(inflow[0], "event_id") != "LuckyPoolInflow:evt-lucky-ok" || rttest.Header(inflow[1], "event_id") != "LuckyPoolInflow:evt-lucky-max" {
		t.Fatalf("inflow %v", inflow)
	}
}

// TestCrashExactlyOnce kills the room processor at 20 random points while
// it works through mic events, lucky gifts and poison records, and injects
// broker faults (a failed EndTxn, a failed output produce, failed offset
// commits): every output and every DLQ record exists exactly once, equal
// to the oracle, and every mic session is still in order.
func TestCrashExactlyOnce(t *testing.T) {
	e := newEnv(t)
	rule := roomtest.Rule("rose", "v1", 50000, 200000, 300000)
	roomtest.InsertRule(t, e.m.DB, rule)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))

	w := roomtest.Mic(8000, 100, 500, seed)
	recs := w.Records(e.topics.RoomEvents)
	want := map[string]*activityv1.LuckyPoolInflow{}
	poison := 0
	for i := range 1000 {
		c := luckyCase{eventID: fmt.Sprintf("evt-lucky-%d", i), roomID: "room-" + strconv.Itoa(1+i%100), gift: "rose", version: "v1", heat: rng.Int64N(100000)}
		want["LuckyPoolInflow:"+c.eventID] = expectInflow(c, rule)
		pos := rng.IntN(len(recs) + 1)
		recs = slices.Insert(recs, pos, luckyRecord(e.topics.RoomEvents, c, 0))
		if i%50 == 0 {
			recs = slices.Insert(recs, pos, &kgo.Record{Topic: e.topics.RoomEvents, Key: []byte(c.roomID), Value: []byte("poison-" + strconv.Itoa(i))})
			poison++
		}
	}
	e.produce(recs)

	txnID := testenv.UniqueName(t)
	for i := range 20 {
		if e.k.Fake != nil {
			switch i {
			case 3:
				e.k.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, Err: kerr.InvalidTxnState, Count: 1})
			case 7:
				e.k.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: e.topics.UserMicEvents, Err: kerr.InvalidRecord, Count: 1})
			case 11:
				e.k.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.TxnOffsetCommit}, Err: kerr.UnknownServerError, Count: 2})
			}
		}
		ka := &rttest.KillAfter{Proc: room.NewProcessor(e.cfg, e.rules), N: 1 + rng.IntN(1200)}
		rc := fast(e.cfg, txnID).Runtime
		rc.Name = room.Name
		rc.CommitRecords = 50 + rng.IntN(400)
		rt, err := streams.New(rc, ka)
		if err != nil {
			t.Fatal(err)
		}
		ka.RT = rt
		r := rttest.Start(rt)
		select {
		case err := <-r.Done: // killed, or a fatal transaction error from a fault
			t.Logf("crash %d after %d records: %v", i, ka.Seen, err)
		case <-time.After(3 * time.Second):
			t.Logf("crash %d: idle after %d records", i, ka.Seen)
			// Fewer than n records were left: kill it idle.
			r.Kill(t)
		}
		r.Cancel()
	}
	rt, err := room.New(fast(e.cfg, txnID), e.rules)
	if err != nil {
		t.Fatal(err)
	}
	r := rttest.Start(rt)
	mics := e.read(e.topics.UserMicEvents, len(w.Events))
	inflow := e.read(e.topics.LuckyPoolInflow, len(want))
	dlq := e.read(e.topics.DLQ, poison)
	r.Stop(t)

	seen := map[string]int{}
	session := map[string]string{}
	for _, ev := range w.Events {
		session[ev.EventID] = ev.SessionID
	}
	order := map[string][]string{}
	for _, rec := range mics {
		id := rttest.Header(rec, "event_id")
		seen[id]++
		order[session[id]] = append(order[session[id]], id)
	}
	for _, ev := range w.Events {
		if seen[ev.EventID] != 1 {
			t.Fatalf("mic event %s emitted %d times", ev.EventID, seen[ev.EventID])
		}
	}
	for sid, want := range w.Sessions {
		if !slices.Equal(order[sid], want) {
			t.Fatalf("session %s out of order after crashes: got %v want %v", sid, order[sid], want)
		}
	}
	if len(mics) != len(w.Events) {
		t.Fatalf("%d mic outputs, want %d", len(mics), len(w.Events))
	}
	checkInflow(t, inflow, want)
	dlqSeen := map[string]int{}
	for _, d := range dlq {
		dlqSeen[string(d.Value)]++
	}
	if len(dlq) != poison || len(dlqSeen) != poison {
		t.Fatalf("%d DLQ records (%d distinct), want %d", len(dlq), len(dlqSeen), poison)
	}
}

// TestRuleStoreOutageRetries: while the rule table is unavailable, lucky
// gifts are neither dropped nor dead-lettered: the failing partition stalls
// and retries its record until MySQL answers again; then every inflow is
// emitted exactly once.
func TestRuleStoreOutageRetries(t *testing.T) {
	e := newEnv(t)
	rule := roomtest.Rule("rose", "v1", 50000, 200000, 300000)
	roomtest.InsertRule(t, e.m.DB, rule)
	if _, err := e.m.DB.Exec("RENAME TABLE lucky_gift_rules TO lucky_gift_rules_offline"); err != nil {
		t.Fatal(err)
	}
	want := map[string]*activityv1.LuckyPoolInflow{}
	var recs []*kgo.Record
	for i := range 50 {
		c := luckyCase{eventID: fmt.Sprintf("evt-outage-%d", i), roomID: "room-" + strconv.Itoa(i%5), gift: "rose", version: "v1", heat: int64(1000 * (i + 1))}
		want["LuckyPoolInflow:"+c.eventID] = expectInflow(c, rule)
		recs = append(recs, luckyRecord(e.topics.RoomEvents, c, int64(i+1)))
	}
	e.produce(recs)
	reg := prometheus.NewRegistry()
	cfg := fast(e.cfg, testenv.UniqueName(t))
	cfg.Runtime.Registerer = reg
	rt, err := room.New(cfg, e.rules)
	if err != nil {
		t.Fatal(err)
	}
	r := rttest.Start(rt)
	time.Sleep(1500 * time.Millisecond)
	if n := len(rttest.ReadCommitted(t, e.k.Brokers, e.topics.LuckyPoolInflow, 0, 200*time.Millisecond, time.Second)); n != 0 {
		t.Fatalf("%d inflows emitted without rules", n)
	}
	if _, err := e.m.DB.Exec("RENAME TABLE lucky_gift_rules_offline TO lucky_gift_rules"); err != nil {
		t.Fatal(err)
	}
	out := e.read(e.topics.LuckyPoolInflow, len(want))
	r.Stop(t)
	checkInflow(t, out, want)
	if n := len(rttest.ReadCommitted(t, e.k.Brokers, e.topics.DLQ, 0, 200*time.Millisecond, time.Second)); n != 0 {
		t.Fatalf("%d records dead-lettered during the outage", n)
	}
	if stalls, _ := testenv.Metric(reg, "roomflow_process_partition_stalls_total"); stalls < 1 {
		t.Fatal("no partition stall recorded during the outage")
	}
}

// TestShutdownDuringRuleLoad: SIGTERM while a rule query hangs (the rule
// table is write-locked by another session) stops the processor cleanly:
// Run returns nil, nothing is emitted, and a successor emits the inflow
// exactly once.
func TestShutdownDuringRuleLoad(t *testing.T) {
	e := newEnv(t)
	rule := roomtest.Rule("rose", "v1", 50000, 200000, 300000)
	roomtest.InsertRule(t, e.m.DB, rule)
	ctx := context.Background()
	conn, err := e.m.DB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "LOCK TABLES lucky_gift_rules WRITE"); err != nil {
		t.Fatal(err)
	}
	c := luckyCase{eventID: "evt-locked", roomID: "room-1", gift: "rose", version: "v1", heat: 12345}
	e.produce([]*kgo.Record{luckyRecord(e.topics.RoomEvents, c, 1)})
	txnID := testenv.UniqueName(t)
	rt, err := room.New(fast(e.cfg, txnID), e.rules)
	if err != nil {
		t.Fatal(err)
	}
	r := rttest.Start(rt)
	time.Sleep(time.Second) // the rule query is now blocked on the lock
	r.Stop(t)               // Run must return nil
	if _, err := conn.ExecContext(ctx, "UNLOCK TABLES"); err != nil {
		t.Fatal(err)
	}
	rt2, err := room.New(fast(e.cfg, txnID), e.rules)
	if err != nil {
		t.Fatal(err)
	}
	r2 := rttest.Start(rt2)
	out := e.read(e.topics.LuckyPoolInflow, 1)
	r2.Stop(t)
	checkInflow(t, out, map[string]*activityv1.LuckyPoolInflow{"LuckyPoolInflow:evt-locked": expectInflow(c, rule)})
}

// TestDefaultAppCode: an envelope without app_code belongs to the
// configured app_code: its outputs (the forwarded mic envelope, value and
// header, and the inflow) equal those of the same envelope naming that
// app_code itself, so the mic processor and the sink derive the same facts.
func TestDefaultAppCode(t *testing.T) {
	e := newMemEnv(t)
	e.cfg.AppCode = "fallback"
	roomtest.InsertRule(t, e.m.DB, roomtest.Rule("rose", "v1", 50000, 200000, 300000))
	payload := func(m proto.Message) []byte { b, _ := proto.Marshal(m); return b }
	var in []*kgo.Record
	for _, app := range []string{"", "fallback"} {
		mic, _ := proto.Marshal(&roomv1.EventEnvelope{EventId: "evt-mic", EventType: "RoomMicChanged", AppCode: app, RoomId: "r1",
			OccurredAtMs: 1000, Payload: payload(&roomv1.RoomMicChanged{UserId: 5, Action: "up", MicSessionId: "s"})})
		gift, _ := proto.Marshal(&roomv1.EventEnvelope{EventId: "evt-gift", EventType: "RoomGiftSent", AppCode: app, RoomId: "r1",
			Payload: payload(&roomv1.RoomGiftSent{GiftId: "rose", Lucky: true, LuckyRuleVersion: "v1", HeatValue: 100})})
		in = append(in, &kgo.Record{Topic: e.topics.RoomEvents, Key: []byte("r1"), Value: mic},
			&kgo.Record{Topic: e.topics.RoomEvents, Key: []byte("r1"), Value: gift})
	}
	d := e.drive(in)
	mics, inflows := d.Output(e.topics.UserMicEvents), d.Output(e.topics.LuckyPoolInflow)
	for name, recs := range map[string][]*kgo.Record{"mic": mics, "inflow": inflows} {
		var msgs [2]proto.Message
		for i, rec := range recs {
			if rttest.Header(rec, "app_code") != "fallback" {
				t.Fatalf("%s output %d: app_code header %q", name, i, rttest.Header(rec, "app_code"))
			}
			var m interface {
				proto.Message
				GetAppCode() string
			} = new(roomv1.EventEnvelope)
			if name == "inflow" {
				m = new(activityv1.LuckyPoolInflow)
			}
			if err := proto.Unmarshal(rec.Value, m); err != nil || m.GetAppCode() != "fallback" {
				t.Fatalf("%s output %d: app_code %q (%v)", name, i, m.GetAppCode(), err)
			}
			msgs[i] = m
		}
		if len(recs) != 2 || !proto.Equal(msgs[0], msgs[1]) {
			t.Fatalf("%s outputs differ between an empty and the explicit app_code:\n%v\n%v", name, msgs[0], msgs[1])
		}
	}
}

// TestConfigValidate: New refuses an invalid config with the key of the
// field, the runtime's under "runtime."; a zero rule source is refused too.
func TestConfigValidate(t *testing.T) {
	valid := testConfig(t, nil)
	valid.Runtime.Kafka.Brokers = []string{"localhost:9092"}
	for key, set := range map[string]func(*room.Config){
		"mic_topic":              func(c *room.Config) { c.MicTopic = "" },
		"inflow_topic":           func(c *room.Config) { c.InflowTopic = "" },
		"app_code":               func(c *room.Config) { c.AppCode = strings.Repeat("a", 33) },
		"runtime.group":          func(c *room.Config) { c.Runtime.Group = "" },
		"runtime.commit_records": func(c *room.Config) { c.Runtime.CommitRecords = -1 },
		"runtime.kafka.brokers":  func(c *room.Config) { c.Runtime.Kafka.Brokers = nil },
	} {
		c := valid
		set(&c)
		if _, err := room.New(c, noRules{}); err == nil || !strings.Contains(err.Error(), "config: "+key+": ") {
			t.Errorf("%s: New = %v", key, err)
		}
	}
	rt, err := room.New(valid, noRules{})
	if err != nil {
		t.Fatalf("valid config: %v", err)
	}
	if err := rt.Ready(); err == nil || !strings.Contains(err.Error(), "runtime room:") {
		t.Fatalf("runtime not named %q: %v", room.Name, err)
	}
	if _, err := room.New(valid, nil); err == nil {
		t.Fatal("nil rule source accepted")
	}
}

// noRules is a rule source without rules.
type noRules struct{}

func (noRules) Get(_ context.Context, giftID, version string) (*lucky.Rule, error) {
	return nil, fmt.Errorf("%w: %s/%s", lucky.ErrUnknownRule, giftID, version)
}
