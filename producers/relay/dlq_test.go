package relay_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/testenv"
)

// TestDeadLetters: an empty payload and an oversized one go to the DLQ with
// a reason header, in order with the rest; a malformed envelope is
// forwarded as bytes; routes send an event type to its own topic; the relay
// does not stall.
func TestDeadLetters(t *testing.T) { forModes(t, testDeadLetters) }

func testDeadLetters(t *testing.T, mode relayMode) {
	k := newKafka(t)
	m := mode.mysql(t)
	cfg := mode.config(testConfig(t, k), m)
	cfg.MaxRecordBytes = 4096
	cfg.Routes = map[string]string{"RoomGiftSent": k.Config.Topics.LuckyPoolInflow}
	x := startRelay(t, cfg, m.DB, nil)
	ctx := context.Background()

	now := time.Now().UnixMilli()
	rows := []outboxRow{
		{eventID: "ok-1", eventType: "RoomMicChanged", roomID: "r1", version: 1, payload: payloadFor("ok-1", 100), occurred: now},
		{eventID: "empty", eventType: "RoomMicChanged", roomID: "r1", version: 2, payload: []byte{}, occurred: now},
		{eventID: "huge", eventType: "RoomMicChanged", roomID: "r1", version: 3, payload: bytes.Repeat([]byte{9}, 10_000), occurred: now},
		{eventID: "garbage", eventType: "RoomMicChanged", roomID: "r1", version: 4, payload: []byte{0xff, 0xff, 0xff, 0x01}, occurred: now},
		{eventID: "gift", eventType: "RoomGiftSent", roomID: "r2", version: 1, payload: payloadFor("gift", 50), occurred: now},
		{eventID: "ok-2", eventType: "RoomMicChanged", roomID: "r1", version: 5, payload: payloadFor("ok-2", 100), occurred: now},
	}
	if err := insertRows(ctx, m.DB, rows); err != nil {
		t.Fatal(err)
	}
	waitCount(t, k, cfg.Topic, 3, 30*time.Second)
	waitCount(t, k, cfg.DLQTopic, 2, 30*time.Second)
	waitCount(t, k, k.Config.Topics.LuckyPoolInflow, 1, 30*time.Second)
	x.stop(t)

	events := drain(t, k, cfg.Topic)
	var ids []string
	for _, r := range events {
		ids = append(ids, r.eventID())
		if r.headers["content-type"] != "application/x-protobuf" || r.headers["app_code"] != "hyapp" ||
			r.headers["event_type"] != "RoomMicChanged" || r.headers["occurred_at_ms"] == "" {
			t.Errorf("%s: headers %v", r.eventID(), r.headers)
		}
		if r.eventID() == "garbage" && !bytes.Equal(r.value, []byte{0xff, 0xff, 0xff, 0x01}) {
			t.Errorf("malformed envelope not forwarded as stored: %x", r.value)
		}
	}
	if len(ids) != 3 || ids[0] != "ok-1" || ids[1] != "garbage" || ids[2] != "ok-2" {
		t.Errorf("room events = %v, want [ok-1 garbage ok-2]", ids)
	}
	dlq := drain(t, k, cfg.DLQTopic)
	reasons := map[string]string{}
	for _, r := range dlq {
		reasons[r.eventID()] = r.headers["error"]
		if r.key != "r1" || r.headers["source"] != "room_outbox" || r.headers["source_id"] == "" ||
			r.headers["source_topic"] != cfg.Topic || r.headers["room_version"] == "" {
			t.Errorf("dlq %s: key %q headers %v", r.eventID(), r.key, r.headers)
		}
	}
	if len(dlq) != 2 || reasons["empty"] != "empty_payload" || reasons["huge"] != "payload_too_large" {
		t.Errorf("dlq = %v, want empty->empty_payload, huge->payload_too_large", reasons)
	}
	gifts := drain(t, k, k.Config.Topics.LuckyPoolInflow)
	if len(gifts) != 1 || gifts[0].eventID() != "gift" || !bytes.Equal(gifts[0].value, payloadFor("gift", 50)) {
		t.Errorf("routed topic = %+v", gifts)
	}
	if got := metric(t, x.reg, "roomflow_relay_events_total", "result", "dead_lettered"); got != 2 {
		t.Errorf("dead_lettered = %v, want 2", got)
	}
	if got := metric(t, x.reg, "roomflow_relay_events_total", "result", "relayed"); got != 4 {
		t.Errorf("relayed = %v, want 4", got)
	}
}

// TestBrokerRefusal: a record within relay.max_record_bytes that the topic
// still refuses (its max.message.bytes is smaller) aborts that transaction
// once; the retry dead-letters the row and relays the rest exactly once.
func TestBrokerRefusal(t *testing.T) {
	k := newKafka(t)
	m := testenv.NewMySQL(t)
	cfg := testConfig(t, k)
	small := cfg.Topic + ".small"
	createTopic(t, k, small, 1500)
	cfg.Routes = map[string]string{"RoomUserJoined": small}
	x := startRelay(t, cfg, m.DB, nil)

	now := time.Now().UnixMilli()
	rows := []outboxRow{
		{eventID: "j-1", eventType: "RoomUserJoined", roomID: "r1", version: 1, payload: payloadFor("j-1", 100), occurred: now},
		{eventID: "j-big", eventType: "RoomUserJoined", roomID: "r1", version: 2, payload: payloadFor("j-big", 5000), occurred: now},
		{eventID: "j-3", eventType: "RoomUserJoined", roomID: "r1", version: 3, payload: payloadFor("j-3", 100), occurred: now},
		{eventID: "m-1", eventType: "RoomMicChanged", roomID: "r2", version: 1, payload: payloadFor("m-1", 100), occurred: now},
	}
	if err := insertRows(context.Background(), m.DB, rows); err != nil {
		t.Fatal(err)
	}
	waitCount(t, k, cfg.DLQTopic, 1, 60*time.Second)
	waitCount(t, k, small, 2, 30*time.Second)
	x.stop(t)

	dlq := drain(t, k, cfg.DLQTopic)
	if len(dlq) != 1 || dlq[0].eventID() != "j-big" || dlq[0].headers["error"] != "rejected_by_broker" ||
		dlq[0].headers["payload_bytes"] != "5000" || dlq[0].headers["source_topic"] != small {
		t.Fatalf("dlq = %+v", dlq)
	}
	got := append(drain(t, k, small), drain(t, k, cfg.Topic)...)
	oracle := loadOracle(t, m.DB)
	delete(oracle, "j-big")
	checkExactlyOnce(t, oracle, got)
	if a := metric(t, x.reg, "roomflow_relay_batches_total", "result", "aborted"); a < 1 {
		t.Errorf("aborted batches = %v, want the refused transaction counted", a)
	}
}
