package relay

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func header(r *kgo.Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

func TestRouterRecord(t *testing.T) {
	rt := Router{Default: "events", Routes: map[string]string{"RoomGiftSent": "gifts"}, DLQ: "dlq", MaxRecordBytes: 2048}
	base := Row{ID: 77, AppCode: "app", EventID: "e-1", EventType: "RoomMicChanged", RoomID: "room-9",
		RoomVersion: 12, Payload: []byte{1, 2, 3}, OccurredAtMs: 1_700_000_000_123}
	tests := []struct {
		name      string
		mut       func(*Row)
		forced    DLQReason
		topic     string
		reason    DLQReason
		value     []byte
		sizeHeadr string
	}{
		{name: "default route", topic: "events", value: []byte{1, 2, 3}},
		{name: "configured route", mut: func(r *Row) { r.EventType = "RoomGiftSent" }, topic: "gifts", value: []byte{1, 2, 3}},
		{name: "malformed envelope is forwarded as bytes", mut: func(r *Row) { r.Payload = []byte("not a protobuf \xff\xfe") },
			topic: "events", value: []byte("not a protobuf \xff\xfe")},
		{name: "empty payload", mut: func(r *Row) { r.Payload = nil }, topic: "dlq", reason: DLQEmptyPayload},
		{name: "too large", mut: func(r *Row) { r.Payload = bytes.Repeat([]byte{7}, 2000) }, topic: "dlq",
			reason: DLQTooLarge, sizeHeadr: "2000"},
		{name: "just fits", mut: func(r *Row) { r.Payload = bytes.Repeat([]byte{7}, 1600) }, topic: "events",
			value: bytes.Repeat([]byte{7}, 1600)},
		{name: "refused by broker", forced: DLQRejected, topic: "dlq", reason: DLQRejected, sizeHeadr: "3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			row := base
			if tc.mut != nil {
				tc.mut(&row)
			}
			rec, reason := rt.Record(&row, tc.forced)
			if rec.Topic != tc.topic || reason != tc.reason {
				t.Fatalf("topic %q reason %q, want %q %q", rec.Topic, reason, tc.topic, tc.reason)
			}
			if string(rec.Key) != "room-9" || !rec.Timestamp.Equal(time.UnixMilli(1_700_000_000_123)) {
				t.Fatalf("key %q ts %v", rec.Key, rec.Timestamp)
			}
			if !bytes.Equal(rec.Value, tc.value) {
				t.Fatalf("value %q, want %q", rec.Value, tc.value)
			}
			want := map[string]string{"event_id": "e-1", "event_type": row.EventType, "app_code": "app",
				"room_version": "12", "occurred_at_ms": "1700000000123", "content-type": "application/x-protobuf"}
			if reason != "" {
				want["error"] = string(reason)
				want["error_reason"] = string(reason) // as in every stage's DLQ records
				want["source_id"] = "77"
				want["source"] = "room_outbox"
				want["stage"] = "relay"
			}
			if tc.sizeHeadr != "" {
				want["payload_bytes"] = tc.sizeHeadr
			}
			for k, v := range want {
				if got, ok := header(rec, k); !ok || got != v {
					t.Errorf("header %s = %q (present %v), want %q", k, got, ok, v)
				}
			}
			if reason == "" && strings.Contains(headerKeys(rec), "error") {
				t.Errorf("relayed record has an error header")
			}
		})
	}
}

func headerKeys(r *kgo.Record) string {
	var ks []string
	for _, h := range r.Headers {
		ks = append(ks, h.Key)
	}
	return strings.Join(ks, ",")
}

// TestStamp: a record keeps occurred_at_ms as its timestamp unless a
// broker would refuse it (Kafka 4.0 refuses more than an hour ahead by
// default) or refused it already; then it takes the relay's time.
func TestStamp(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	for _, tc := range []struct {
		name     string
		occurred int64
		refused  bool
		want     time.Time
		reason   RestampReason
	}{
		{"now", now.UnixMilli(), false, now, ""},
		{"a day old", now.Add(-24 * time.Hour).UnixMilli(), false, now.Add(-24 * time.Hour), ""},
		{"an hour ahead", now.Add(MaxFutureSkew).UnixMilli(), false, now.Add(MaxFutureSkew), ""},
		{"past an hour ahead", now.Add(MaxFutureSkew).UnixMilli() + 1, false, now, RestampFuture},
		{"microseconds", now.UnixMicro(), false, now, RestampFuture},
		{"zero", 0, false, now, RestampNotPositive},
		{"negative", -1, false, now, RestampNotPositive},
		{"refused by the broker", now.Add(-48 * time.Hour).UnixMilli(), true, now, RestampRefused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, reason := Stamp(&Row{OccurredAtMs: tc.occurred}, now, tc.refused)
			if !got.Equal(tc.want) || reason != tc.reason {
				t.Fatalf("Stamp(%d) = %v %q, want %v %q", tc.occurred, got, reason, tc.want, tc.reason)
			}
		})
	}
}
