package peek

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/schemas/envelope"
	"github.com/hyapp/roomflow/schemas/roomv1"
	"github.com/hyapp/roomflow/schemas/userv1"
)

func peekHeaders(id, typ string) []kgo.RecordHeader {
	return []kgo.RecordHeader{{Key: "event_id", Value: []byte(id)}, {Key: "event_type", Value: []byte(typ)},
		{Key: "app_code", Value: []byte("hyapp")}, {Key: "content-type", Value: []byte("application/x-protobuf")}}
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// produceTxn writes recs in one transaction, committed or aborted.
func produceTxn(t *testing.T, cl *kgo.Client, commit bool, recs ...*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		t.Fatal(err)
	}
}

// peekLines parses the JSON lines of a peek run.
func peekLines(t *testing.T, out string) []peekRecord {
	t.Helper()
	var recs []peekRecord
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r peekRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("not a JSON line: %v: %s", err, sc.Text())
		}
		recs = append(recs, r)
	}
	return recs
}

// run is Run with Defaults changed by set (nil: none) and a minute to
// finish, returning what it printed.
func run(t *testing.T, cfg *config.Config, topic string, set func(*Options)) (string, error) {
	t.Helper()
	o := Defaults
	if set != nil {
		set(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	err := Run(ctx, cfg, topic, o, &out)
	return out.String(), err
}

// follow runs Run --offset end --follow until stop interrupts it.
func follow(t *testing.T, cfg *config.Config, topic string) (stop func() error, out *testenv.SyncBuffer) {
	t.Helper()
	o := Defaults
	o.Offset, o.Follow = "end", true
	out = &testenv.SyncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, topic, o, out) }()
	return func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			t.Fatal("peek did not stop on cancel")
			return nil
		}
	}, out
}

// TestPeek produces committed and aborted records of several types on
// kfake (or a real cluster) and reads them back through Run, as `roomflow peek` does.
func TestPeek(t *testing.T) {
	k := testenv.NewKafka(t, testenv.Partitions(2))
	tp := k.Config.Topics
	cfg := testenv.Config(t, k, nil)
	txn := k.Client(t, kgo.TransactionalID(testenv.UniqueName(t)), kgo.DefaultProduceTopic(tp.MicSessionClosed))

	closed := &userv1.UserMicSessionClosed{EventId: "UserMicSessionClosed:s1", AppCode: "hyapp", UserId: 42, MicSessionId: "s1",
		SeatOccupiedMs: 60000, MicOnlineMs: 30000, EndReason: userv1.MicEndReason_kick.String()}
	produceTxn(t, txn, true, &kgo.Record{Topic: tp.MicSessionClosed, Partition: 0, Key: []byte("42"), Value: mustMarshal(t, closed),
		Headers: peekHeaders(closed.EventId, "UserMicSessionClosed")})
	// An aborted transaction must never show (read_committed).
	produceTxn(t, txn, false, &kgo.Record{Topic: tp.MicSessionClosed, Partition: 0, Key: []byte("43"),
		Value:   mustMarshal(t, &userv1.UserMicSessionClosed{EventId: "UserMicSessionClosed:aborted", UserId: 43}),
		Headers: peekHeaders("UserMicSessionClosed:aborted", "UserMicSessionClosed")})
	second := &userv1.UserMicSessionClosed{EventId: "UserMicSessionClosed:s2", AppCode: "hyapp", UserId: 44, MicSessionId: "s2"}
	produceTxn(t, txn, true, &kgo.Record{Topic: tp.MicSessionClosed, Partition: 1, Key: []byte("44"), Value: mustMarshal(t, second),
		Headers: peekHeaders(second.EventId, "UserMicSessionClosed")})
	// A room event (envelope + payload) and a dead letter.
	env := &roomv1.EventEnvelope{EventId: "e-1", EventType: "RoomMicChanged", AppCode: "hyapp", RoomId: "r-1", RoomVersion: 3,
		OccurredAtMs: 1777000000000, Payload: mustMarshal(t, &roomv1.RoomMicChanged{UserId: 42, Action: "down", MicSessionId: "s1", Reason: "kick"})}
	dead := []byte{0xff, 0x00, 0x01}
	produceTxn(t, txn, true,
		&kgo.Record{Topic: tp.RoomEvents, Partition: 1, Key: []byte("r-1"), Value: mustMarshal(t, env), Headers: peekHeaders("e-1", "RoomMicChanged")},
		&kgo.Record{Topic: tp.DLQ, Partition: 0, Key: []byte("r-9"), Value: dead, Headers: append(peekHeaders("e-9", "RoomMicChanged"),
			kgo.RecordHeader{Key: "error_reason", Value: []byte("bad_envelope")}, kgo.RecordHeader{Key: "source_topic", Value: []byte(tp.RoomEvents)})})

	// A topic key resolves to its configured name; both partitions, committed only.
	out, err := run(t, cfg, "mic_session_closed", nil)
	if err != nil {
		t.Fatalf("peek: %v\n%s", err, out)
	}
	recs := peekLines(t, out)
	if len(recs) != 2 {
		t.Fatalf("want the 2 committed records, got %d:\n%s", len(recs), out)
	}
	byID := map[string]peekRecord{}
	for _, r := range recs {
		byID[r.Headers["event_id"]] = r
	}
	r, ok := byID[closed.EventId]
	if !ok || r.Type != "hyapp.user.v1.UserMicSessionClosed" || r.Key != "42" || r.Partition != 0 || r.Headers["content-type"] != "application/x-protobuf" {
		t.Fatalf("closed record: %+v", r)
	}
	var v map[string]any
	if err := json.Unmarshal(r.Value, &v); err != nil || v["end_reason"] != "kick" || v["mic_online_ms"] != "30000" || v["user_id"] != "42" {
		t.Fatalf("closed value %s: %v", r.Value, err)
	}
	if _, ok := v["publishing_started_at_ms"]; !ok {
		t.Fatalf("zero fields must be printed: %s", r.Value)
	}

	// --partition, --offset -N and --count.
	out, err = run(t, cfg, tp.MicSessionClosed, func(o *Options) { o.Partition = 1; o.Offset = "-1" })
	if recs := peekLines(t, out); err != nil || len(recs) != 1 || recs[0].Headers["event_id"] != second.EventId {
		t.Fatalf("--partition 1 --offset -1: %v\n%s", err, out)
	}
	// Partition 0 ends with an aborted transaction: -1 still finds its last committed record.
	out, err = run(t, cfg, tp.MicSessionClosed, func(o *Options) { o.Partition = 0; o.Offset = "-1" })
	if recs := peekLines(t, out); err != nil || len(recs) != 1 || recs[0].Headers["event_id"] != closed.EventId {
		t.Fatalf("--partition 0 --offset -1: %v\n%s", err, out)
	}
	out, err = run(t, cfg, tp.MicSessionClosed, func(o *Options) { o.Offset = "-5" })
	if recs := peekLines(t, out); err != nil || len(recs) != 2 {
		t.Fatalf("--offset -5 over both partitions: %v\n%s", err, out)
	}
	out, err = run(t, cfg, tp.MicSessionClosed, func(o *Options) { o.Partition = 0; o.Offset = "1" })
	if recs := peekLines(t, out); err != nil || len(recs) != 0 {
		t.Fatalf("--offset 1 of partition 0 (past its only committed record): %v\n%s", err, out)
	}
	out, err = run(t, cfg, "mic_session_closed", func(o *Options) { o.Count = 1 })
	if recs := peekLines(t, out); err != nil || len(recs) != 1 {
		t.Fatalf("--count 1: %v\n%s", err, out)
	}
	out, err = run(t, cfg, "mic_session_closed", func(o *Options) { o.Offset = "end" })
	if err != nil || out != "" {
		t.Fatalf("--offset end without --follow prints nothing: %v\n%s", err, out)
	}

	// The envelope and its payload.
	out, err = run(t, cfg, "room_events", nil)
	recs = peekLines(t, out)
	if err != nil || len(recs) != 1 || recs[0].Type != "hyapp.room.v1.EventEnvelope" {
		t.Fatalf("room events: %v\n%s", err, out)
	}
	var pay map[string]any
	if err := json.Unmarshal(recs[0].Payload, &pay); err != nil || pay["action"] != "down" || pay["mic_session_id"] != "s1" || pay["user_id"] != "42" {
		t.Fatalf("payload %s: %v", recs[0].Payload, err)
	}

	// Dead letters: headers and the raw value.
	out, err = run(t, cfg, "dlq", nil)
	recs = peekLines(t, out)
	if err != nil || len(recs) != 1 || !bytes.Equal(recs[0].ValueBase64, dead) || recs[0].Value != nil ||
		recs[0].Headers["error_reason"] != "bad_envelope" || recs[0].Headers["source_topic"] != tp.RoomEvents {
		t.Fatalf("dlq: %v\n%s", err, out)
	}
	if !strings.Contains(out, `"value_base64":"/wAB"`) {
		t.Fatalf("dlq value must be base64: %s", out)
	}

	// Bad input.
	if _, err := run(t, cfg, "mic_session_closed", func(o *Options) { o.Offset = "latest" }); err == nil {
		t.Fatal("--offset latest accepted")
	}
	if _, err := run(t, cfg, "mic_session_closed", func(o *Options) { o.Partition = 7 }); err == nil {
		t.Fatal("a partition that does not exist accepted")
	}
}

// TestPeekFollow: --follow prints records committed after it started.
func TestPeekFollow(t *testing.T) {
	k := testenv.NewKafka(t, testenv.Partitions(2))
	tp := k.Config.Topics
	stop, out := follow(t, testenv.Config(t, k, nil), "mic_lifetime_stats")
	txn := k.Client(t, kgo.TransactionalID(testenv.UniqueName(t)))
	lt := &userv1.UserMicLifetimeStatsUpdated{EventId: "UserMicLifetimeStatsUpdated:s7", UserId: 7, SessionCountDelta: 1}
	// Keep committing until the follower, which may start after the first
	// commit, prints one.
	testenv.Eventually(t, 60*time.Second, "peek --follow prints a newly committed record", func() bool {
		produceTxn(t, txn, true, &kgo.Record{Topic: tp.MicLifetimeStats, Key: []byte("7"), Value: mustMarshal(t, lt),
			Headers: peekHeaders(lt.EventId, "UserMicLifetimeStatsUpdated")})
		return strings.Contains(out.String(), `"session_count_delta":"1"`)
	})
	if err := stop(); err != nil {
		t.Fatalf("peek --follow on interrupt: %v\n%s", err, out)
	}
}

// decodeRecord off the design's topics: an envelope routed elsewhere by
// relay.routes is recognised by its room event type; a derived event by its
// type; anything else, and a value that does not parse, stays raw.
func TestPeekDecodeByHeader(t *testing.T) {
	topics := testenv.Config(t, nil, nil).Kafka.Topics
	gift := &roomv1.EventEnvelope{EventId: "g-1", EventType: "RoomGiftSent", RoomId: "r-1",
		Payload: mustMarshal(t, &roomv1.RoomGiftSent{GiftId: "rose", GiftCount: 3, Lucky: true})}
	r := decodeRecord(topics, &kgo.Record{Topic: "hyapp.room.gifts.v1", Value: mustMarshal(t, gift), Headers: peekHeaders("g-1", "RoomGiftSent")})
	var pay map[string]any
	if err := json.Unmarshal(r.Payload, &pay); r.Type != "hyapp.room.v1.EventEnvelope" || err != nil || pay["gift_id"] != "rose" || pay["lucky"] != true {
		t.Fatalf("routed envelope: %+v %v", r, err)
	}
	daily := &userv1.UserMicDailyStatsUpdated{EventId: "d", StatDate: "2026-11-30", SessionCountDelta: 1}
	if r := decodeRecord(topics, &kgo.Record{Topic: "mirror", Value: mustMarshal(t, daily), Headers: peekHeaders("d", "UserMicDailyStatsUpdated")}); r.Type != "hyapp.user.v1.UserMicDailyStatsUpdated" {
		t.Fatalf("derived event by header: %+v", r)
	}
	total := &userv1.UserMicLifetimeTotals{EventId: "t", UserId: 7, SessionCount: 3}
	if r := decodeRecord(topics, &kgo.Record{Topic: topics.MicLifetimeTotals, Value: mustMarshal(t, total)}); r.Type != "hyapp.user.v1.UserMicLifetimeTotals" {
		t.Fatalf("a totals topic's record without headers: %+v", r)
	}
	if r := decodeRecord(topics, &kgo.Record{Topic: "mirror", Value: []byte("x"), Headers: peekHeaders("u", "SomethingElse")}); r.Value != nil || string(r.ValueBase64) != "x" {
		t.Fatalf("unknown type: %+v", r)
	}
	if r := decodeRecord(topics, &kgo.Record{Topic: topics.MicLedger, Value: []byte{0xff, 0xff}}); r.DecodeError == "" || len(r.ValueBase64) != 2 || r.Value != nil {
		t.Fatalf("corrupt ledger value: %+v", r)
	}
}

// A public topic across a wire format switch holds plain and
// Confluent-framed records: peek shows both as their message (by the
// content-type, else the leading 0), and the framing header as it is.
func TestPeekBothWireFormats(t *testing.T) {
	topics := testenv.Config(t, nil, nil).Kafka.Topics
	closed := &userv1.UserMicSessionClosed{EventId: "UserMicSessionClosed:s", UserId: 7, MicOnlineMs: 1500}
	plain := mustMarshal(t, closed)
	f := envelope.Confluent(9, closed.ProtoReflect().Descriptor())
	framed := append(append([]byte(nil), f.Prefix...), plain...)
	for name, r := range map[string]*kgo.Record{
		"plain":                       {Topic: topics.MicSessionClosed, Value: plain, Headers: peekHeaders("s", "UserMicSessionClosed")},
		"framed":                      {Topic: topics.MicSessionClosed, Value: framed, Headers: envelope.AppendHeadersAs(nil, []byte("s"), []byte("UserMicSessionClosed"), []byte("hyapp"), f.Header())},
		"framed without content-type": {Topic: topics.MicSessionClosed, Value: framed},
		"framed, routed elsewhere":    {Topic: "mirror", Value: framed, Headers: envelope.AppendHeadersAs(nil, []byte("s"), []byte("UserMicSessionClosed"), []byte("hyapp"), f.Header())},
	} {
		got := decodeRecord(topics, r)
		var v map[string]any
		if err := json.Unmarshal(got.Value, &v); err != nil || got.DecodeError != "" || v["mic_online_ms"] != "1500" {
			t.Errorf("%s: %+v %v", name, got, err)
		}
	}
}

// The lucky events topic holds seven message types: each record is decoded
// by its event_type header (also without a content-type header), and an
// unknown type stays raw.
func TestPeekLuckyEvents(t *testing.T) {
	topics := testenv.Config(t, nil, nil).Kafka.Topics
	for _, m := range []proto.Message{
		&activityv1.LuckyGiftDrawn{EventId: "LuckyGiftDrawn:d1", DrawId: "d1", GiftId: "rose", RewardCoins: 30, Hit: true},
		&activityv1.LuckyRewardGranted{EventId: "LuckyRewardGranted:r1", DrawId: "d1", RewardCoins: 30},
		&activityv1.LuckyRewardPending{EventId: "LuckyRewardPending:r1:0", DrawId: "d1", RewardCoins: 30},
		&activityv1.LuckyPoolChanged{EventId: "LuckyPoolChanged:d1:gift", DrawId: "d1", ScopeType: "gift"},
		&activityv1.LuckyRiskRejected{EventId: "LuckyRiskRejected:d1:user", DrawId: "d1", Scope: "user"},
	} {
		name := string(m.ProtoReflect().Descriptor().Name())
		r := decodeRecord(topics, &kgo.Record{Topic: topics.LuckyEvents, Key: []byte("rose"), Value: mustMarshal(t, m),
			Headers: []kgo.RecordHeader{{Key: "event_type", Value: []byte(name)}}})
		var v map[string]any
		if err := json.Unmarshal(r.Value, &v); err != nil || r.Type != "hyapp.activity.v1."+name || v["draw_id"] != "d1" || r.Key != "rose" {
			t.Fatalf("%s: %+v (%v)", name, r, err)
		}
	}
	// The fairness events, keyed by app_code.
	for _, m := range []proto.Message{
		&activityv1.LuckyFairnessCommitted{EventId: "LuckyFairnessCommitted:hy:2026-12-08", AppCode: "hy", Day: "2026-12-08"},
		&activityv1.LuckyFairnessRevealed{EventId: "LuckyFairnessRevealed:hy:2026-12-08", AppCode: "hy", Day: "2026-12-08"},
	} {
		name := string(m.ProtoReflect().Descriptor().Name())
		r := decodeRecord(topics, &kgo.Record{Topic: topics.LuckyEvents, Key: []byte("hy"), Value: mustMarshal(t, m),
			Headers: []kgo.RecordHeader{{Key: "event_type", Value: []byte(name)}}})
		var v map[string]any
		if err := json.Unmarshal(r.Value, &v); err != nil || r.Type != "hyapp.activity.v1."+name || v["day"] != "2026-12-08" {
			t.Fatalf("%s: %+v (%v)", name, r, err)
		}
	}
	r := decodeRecord(topics, &kgo.Record{Topic: topics.LuckyEvents, Value: []byte("x"), Headers: peekHeaders("e", "LuckyNope")})
	if r.Value != nil || string(r.ValueBase64) != "x" {
		t.Fatalf("unknown lucky event type: %+v", r)
	}
}

// A tombstone (nil value) on a compacted topic deletes its key: peek
// shows it as one, never as a message of zeros.
func TestPeekTombstone(t *testing.T) {
	topics := testenv.Config(t, nil, nil).Kafka.Topics
	for _, topic := range []string{topics.MicLifetimeTotals, topics.MicDailyTotals} {
		got := decodeRecord(topics, &kgo.Record{Topic: topic, Key: []byte("hyapp:7")})
		if !got.Tombstone || got.Type != "" || got.Value != nil || got.DecodeError != "" {
			t.Errorf("%s: tombstone shown as %+v", topic, got)
		}
	}
	got := decodeRecord(topics, &kgo.Record{Topic: topics.MicLifetimeTotals, Key: []byte("hyapp:7"), Value: []byte{}})
	if got.Tombstone || got.Type != "hyapp.user.v1.UserMicLifetimeTotals" {
		t.Errorf("an empty value is an empty message, not a tombstone: %+v", got)
	}
}
