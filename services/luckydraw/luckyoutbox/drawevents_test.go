package luckyoutbox_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/schemas/envelope"
	"github.com/hyapp/roomflow/services/luckydraw/luckyoutbox"
)

// drawEvents are the events of a draw as the draw transaction packs them.
func drawEvents(drawID string) []luckyoutbox.Event {
	var out []luckyoutbox.Event
	add := func(id string, m proto.Message) {
		p, _ := proto.Marshal(m)
		out = append(out, luckyoutbox.Event{MessageType: string(m.ProtoReflect().Descriptor().Name()), EventID: id, Key: "gift-1", Payload: p})
	}
	add("LuckyGiftDrawn:"+drawID, &activityv1.LuckyGiftDrawn{EventId: "LuckyGiftDrawn:" + drawID, DrawId: drawID, GiftId: "gift-1"})
	for _, s := range []string{"platform", "room", "gift"} {
		id := "LuckyPoolChanged:" + drawID + ":" + s
		add(id, &activityv1.LuckyPoolChanged{EventId: id, DrawId: drawID, ScopeType: s})
	}
	id := "LuckyRiskRejected:" + drawID + ":device"
	add(id, &activityv1.LuckyRiskRejected{EventId: id, DrawId: drawID, Scope: "device"})
	return out
}

// An events column decodes to what was encoded; anything else is
// refused as undecodable, never half read.
func TestDrawEventsCodec(t *testing.T) {
	evs := drawEvents("d1")
	b := luckyoutbox.EncodeEvents(evs)
	got, err := luckyoutbox.DecodeEvents(b)
	if err != nil || !slices.EqualFunc(got, evs, func(a, b luckyoutbox.Event) bool {
		return a.MessageType == b.MessageType && a.EventID == b.EventID && a.Key == b.Key && string(a.Payload) == string(b.Payload)
	}) {
		t.Fatalf("round trip: %v %v", got, err)
	}
	if mt := luckyoutbox.MessageTypes(evs); mt != "LuckyGiftDrawn,LuckyPoolChanged,LuckyRiskRejected" {
		t.Fatalf("message_types %q", mt)
	}
	one := func(mt, id string) []byte {
		return luckyoutbox.EncodeEvents([]luckyoutbox.Event{{MessageType: mt, EventID: id, Payload: []byte{1}}})
	}
	for name, bad := range map[string][]byte{
		"empty":                nil,
		"truncated":            b[:len(b)-1],
		"garbage":              []byte("LuckyGiftDrawn:d1"),
		"a lucky_outbox value": evs[0].Payload,
		"unknown message type": one("RoomGiftSent", "x"),
		"no event id":          one("LuckyGiftDrawn", ""),
		"unknown field":        protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), protowire.AppendString(protowire.AppendTag(nil, 9, protowire.BytesType), "x")),
	} {
		if got, err := luckyoutbox.DecodeEvents(bad); !errors.Is(err, luckyoutbox.ErrUndecodable) || got != nil {
			t.Errorf("%s: %v %v, want ErrUndecodable", name, got, err)
		}
	}
}

// seedDrawEvents writes a lucky_draw_events row as the draw transaction
// does, with status, due and lease as given.
func (e *env) seedDrawEvents(drawID string, events []byte, n int, types, status string, lockUntil int64) {
	e.t.Helper()
	now := time.Now().UnixMilli()
	if _, err := e.db.Exec(`INSERT INTO lucky_draw_events (draw_id, app_code, events, event_count, message_types, status, worker_id, lock_until_ms,
		next_retry_at_ms, created_at_ms, updated_at_ms) VALUES (?, ?, ?, ?, ?, ?, 'crashed', ?, ?, ?, ?)`,
		drawID, app, events, n, types, status, lockUntil, now-1, now-1, now); err != nil {
		e.t.Fatal(err)
	}
}

// todaysClaim is the claim of the release before lucky_draw_events, kept
// as it was: a replica of it, still running during a rolling upgrade,
// runs these statements.
var todaysClaim = []string{
	`SELECT event_id, app_code, event_type, message_type, aggregate_id, kafka_key, payload, retry_count FROM lucky_outbox
			WHERE status = 'pending' AND next_retry_at_ms <= ? ORDER BY next_retry_at_ms LIMIT ? FOR UPDATE SKIP LOCKED`,
	`SELECT event_id, app_code, event_type, message_type, aggregate_id, kafka_key, payload, retry_count FROM lucky_outbox
				WHERE status = 'processing' AND lock_until_ms < ? LIMIT ? FOR UPDATE SKIP LOCKED`,
}

// Today's claim, with due draw_events rows pending and lapsed, claims
// none of them (and still claims a due lucky_outbox row).
func TestTodaysClaimSeesNoDrawEventsRow(t *testing.T) {
	e := newEnv(t)
	b := luckyoutbox.EncodeEvents(drawEvents("d1"))
	e.seedDrawEvents("d1", b, 5, "LuckyGiftDrawn", "pending", 0)
	e.seedDrawEvents("d2", b, 5, "LuckyGiftDrawn", "processing", 1)
	e.seedReward(1, 10, 0)
	tx, err := e.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var claimed []string
	for _, q := range todaysClaim {
		rows, err := tx.Query(q, time.Now().UnixMilli(), 100)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id, appCode, typ, msg, agg, key string
			var payload []byte
			var retries int
			if err := rows.Scan(&id, &appCode, &typ, &msg, &agg, &key, &payload, &retries); err != nil {
				t.Fatal(err)
			}
			claimed = append(claimed, id+" of "+agg)
		}
		rows.Close()
	}
	if len(claimed) != 1 || claimed[0] != luckyoutbox.RewardCreditEventID("rw-1")+" of draw-1" {
		t.Fatalf("today's claim took %v, want only the reward_credit row", claimed)
	}
}

// A draw_events row the worker cannot decode is failed with the reason and
// never produced; the row beside it is published whole, ids intact; the
// backlog gauge counts the failed row's events.
func TestUndecodableDrawEventsRowFails(t *testing.T) {
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	w := e.worker(e.config(reg))
	good := drawEvents("good")
	e.seedDrawEvents("good", luckyoutbox.EncodeEvents(good), len(good), luckyoutbox.MessageTypes(good), "pending", 0)
	e.seedDrawEvents("bad", []byte("not an events column"), 5, "LuckyGiftDrawn,LuckyPoolChanged", "pending", 0)
	if n, err := w.ProcessBatch(context.Background()); err != nil || n != 2 {
		t.Fatalf("ProcessBatch = %d, %v", n, err)
	}
	var st, goodSt string
	var lastErr *string
	if err := e.db.QueryRow(`SELECT status, last_error FROM lucky_draw_events WHERE draw_id = 'bad'`).Scan(&st, &lastErr); err != nil {
		t.Fatal(err)
	}
	if st != "failed" || lastErr == nil || !strings.Contains(*lastErr, "undecodable") {
		t.Fatalf("undecodable row: %s %v, want failed with the reason", st, lastErr)
	}
	if err := e.db.QueryRow(`SELECT status FROM lucky_draw_events WHERE draw_id = 'good'`).Scan(&goodSt); err != nil || goodSt != "done" {
		t.Fatalf("good row %s %v, want done", goodSt, err)
	}
	var ids []string
	for _, r := range e.kafka.DrainCommitted(t, e.kafka.Config.Topics.LuckyEvents) {
		id := string(envelope.Header(r, envelope.HeaderEventID))
		ids = append(ids, id)
		i := slices.IndexFunc(good, func(ev luckyoutbox.Event) bool { return ev.EventID == id })
		if i < 0 || string(r.Value) != string(good[i].Payload) || string(r.Key) != "gift-1" ||
			string(envelope.Header(r, envelope.HeaderEventType)) != good[i].MessageType {
			t.Fatalf("record %s (key %q) is none of the good row's events", id, r.Key)
		}
	}
	if len(ids) != len(good) {
		t.Fatalf("published %v, want the good row's %d events", ids, len(good))
	}
	// The gauges: the failed row's five events, by status and by age.
	_, _ = e.db.Exec(`UPDATE lucky_draw_events SET created_at_ms = ? WHERE draw_id = 'bad'`, time.Now().Add(-10*time.Minute).UnixMilli())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	testenv.Eventually(t, 10*time.Second, "backlog refreshed", func() bool {
		v, _ := testenv.Metric(reg, "roomflow_lucky_outbox_backlog", "event_type", "activity_event", "status", "failed")
		return v == 5
	})
	cancel()
	<-done
	if v, _ := testenv.Metric(reg, "roomflow_lucky_outbox_oldest_seconds", "event_type", "LuckyPoolChanged"); v < 590 {
		t.Fatalf("oldest LuckyPoolChanged %vs, want the failed row's age", v)
	}
	if v, _ := testenv.Metric(reg, "roomflow_lucky_outbox_oldest_seconds", "event_type", "LuckyRiskRejected"); v != 0 {
		t.Fatalf("oldest LuckyRiskRejected %vs, want 0: the failed row carries none", v)
	}
}

// A draw_events row with an event the producer refuses (larger than a
// record may be) is retried whole, its other events published meanwhile
// (at least once); the rows beside it in the batch, of both shapes, are
// done on their own results.
func TestDrawEventsRowRetriedWhole(t *testing.T) {
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	w := e.worker(e.config(reg))
	ok := drawEvents("ok")
	e.seedDrawEvents("ok", luckyoutbox.EncodeEvents(ok), len(ok), luckyoutbox.MessageTypes(ok), "pending", 0)
	big := drawEvents("big")
	big[2].Payload = make([]byte, 2<<20) // over the producer's 1 MiB batch limit
	e.seedDrawEvents("big", luckyoutbox.EncodeEvents(big), len(big), luckyoutbox.MessageTypes(big), "pending", 0)
	if _, err := e.db.Exec(`INSERT INTO lucky_outbox (event_id, app_code, event_type, message_type, aggregate_id, kafka_key, payload, status, next_retry_at_ms, created_at_ms, updated_at_ms)
		VALUES ('LuckyGiftDrawn:row', ?, 'activity_event', 'LuckyGiftDrawn', 'row', 'g', 'p', 'pending', 0, 0, 0)`, app); err != nil {
		t.Fatal(err)
	}
	if _, err := w.ProcessBatch(context.Background()); err != nil {
		t.Fatal(err)
	}
	var st string
	var retries int
	var lastErr *string
	if err := e.db.QueryRow(`SELECT status, retry_count, last_error FROM lucky_draw_events WHERE draw_id = 'big'`).Scan(&st, &retries, &lastErr); err != nil {
		t.Fatal(err)
	}
	if st != "pending" || retries != 1 || lastErr == nil || !strings.Contains(*lastErr, big[2].EventID) {
		t.Fatalf("row with a refused event: %s, retry_count %d, last_error %v; want pending, 1, naming the event", st, retries, lastErr)
	}
	if err := e.db.QueryRow(`SELECT status FROM lucky_draw_events WHERE draw_id = 'ok'`).Scan(&st); err != nil || st != "done" {
		t.Fatalf("row beside it: %s %v, want done", st, err)
	}
	if r := e.outbox("LuckyGiftDrawn:row"); r.Status != "done" {
		t.Fatalf("lucky_outbox row beside it: %+v, want done", r)
	}
	seen := map[string]bool{}
	for _, r := range e.kafka.DrainCommitted(t, e.kafka.Config.Topics.LuckyEvents) {
		seen[string(envelope.Header(r, envelope.HeaderEventID))] = true
	}
	for _, ev := range append(ok, big[0], big[1], big[3], big[4]) {
		if !seen[ev.EventID] {
			t.Errorf("%s not published", ev.EventID)
		}
	}
	if seen[big[2].EventID] || !seen["LuckyGiftDrawn:row"] {
		t.Fatalf("published %v", seen)
	}
	// The metrics count events, a row retried whole as its events.
	if v, _ := testenv.Metric(reg, "roomflow_lucky_outbox_done_total", "event_type", "activity_event"); int(v) != len(ok)+1 {
		t.Fatalf("done %v, want %d events", v, len(ok)+1)
	}
	if v, _ := testenv.Metric(reg, "roomflow_lucky_outbox_retries_total", "event_type", "activity_event"); int(v) != len(big) {
		t.Fatalf("retries %v, want the %d events of the row retried whole", v, len(big))
	}
}
