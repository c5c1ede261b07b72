package envelope

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
)

func headers(r *kgo.Record) map[string]string {
	m := map[string]string{}
	for _, h := range r.Headers {
		m[h.Key] = string(h.Value)
	}
	return m
}

func TestDeadLetterOfKafkaRecord(t *testing.T) {
	from := &kgo.Record{Topic: "in", Partition: 3, Offset: 77, Key: []byte("k"), Value: []byte("v"),
		Headers: AppendHeaders(nil, []byte("e1"), []byte("RoomMicChanged"), []byte("hyapp"))}
	long := strings.Repeat("é", MaxErrorBytes) // 2 bytes a rune: the cut falls inside one
	r := (&DeadLetter{Stage: "room", Reason: "decode_envelope", Err: errors.New(long), From: from}).Build("dlq")
	if r.Topic != "dlq" || string(r.Key) != "k" || string(r.Value) != "v" {
		t.Fatalf("record %+v", r)
	}
	h := headers(r)
	want := map[string]string{"event_id": "e1", "event_type": "RoomMicChanged", "app_code": "hyapp", "content-type": ContentType,
		"stage": "room", "error_reason": "decode_envelope", "source_topic": "in", "source_partition": "3", "source_offset": "77"}
	for k, v := range want {
		if h[k] != v {
			t.Errorf("header %s = %q, want %q", k, h[k], v)
		}
	}
	if e := h["error"]; len(e) > MaxErrorBytes || len(e) < MaxErrorBytes-1 || !utf8.ValidString(e) {
		t.Errorf("error header of %d bytes (valid UTF-8 %v), want at most %d", len(e), utf8.ValidString(e), MaxErrorBytes)
	}
	if len(from.Headers) != 4 {
		t.Errorf("the refused record's headers were modified: %v", from.Headers)
	}
}

func TestDeadLetterOfTableRow(t *testing.T) {
	r := (&DeadLetter{Stage: "relay", Reason: "payload_too_large", Source: SourceRoomOutbox, SourceID: 12, SourceTopic: "room-events",
		Key: []byte("room-1"), Extra: []kgo.RecordHeader{{Key: HeaderPayloadBytes, Value: []byte("9000000")}}}).Build("dlq")
	h := headers(r)
	want := map[string]string{"stage": "relay", "error": "payload_too_large", "error_reason": "payload_too_large",
		"source": "room_outbox", "source_id": "12", "source_topic": "room-events", "payload_bytes": "9000000"}
	for k, v := range want {
		if h[k] != v {
			t.Errorf("header %s = %q, want %q", k, h[k], v)
		}
	}
	for _, k := range []string{HeaderSourcePartition, HeaderSourceOffset} {
		if _, ok := h[k]; ok {
			t.Errorf("a table source has no %s", k)
		}
	}
}
