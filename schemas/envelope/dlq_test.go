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

// TestParseDeadLetter: ParseDeadLetter inverts Build for a Kafka record
// (own headers kept apart, even one named like a dead-letter header), a
// table row and a run of ids; Redrive gives back the refused record on its
// source topic and refuses letters without a source topic or a value.
func TestParseDeadLetter(t *testing.T) {
	own := AppendHeaders(nil, []byte("e1"), []byte("RoomMicChanged"), []byte("hyapp"))
	own = append(own, kgo.RecordHeader{Key: HeaderStage, Value: []byte("upstream's own")})
	from := &kgo.Record{Topic: "in", Partition: 3, Offset: 77, Key: []byte("k"), Value: []byte("v"), Headers: own}
	rec := (&DeadLetter{Stage: "sink", Reason: "decode", Err: errors.New("bad bytes"), From: from,
		Extra: []kgo.RecordHeader{{Key: "later_key", Value: []byte("x")}}}).Build("dlq")
	l, err := ParseDeadLetter(rec)
	if err != nil {
		t.Fatal(err)
	}
	if l.Stage != "sink" || l.Reason != "decode" || l.Error != "bad bytes" || l.SourceTopic != "in" || !l.HasOffset ||
		l.SourcePartition != 3 || l.SourceOffset != 77 || len(l.Headers) != len(own) || len(l.Extra) != 1 || l.Extra[0].Key != "later_key" {
		t.Fatalf("parsed %+v", l)
	}
	if o, ok := l.Origin(); !ok || o != (Origin{Topic: "in", Partition: 3, Offset: 77}) {
		t.Errorf("origin %+v %v", o, ok)
	}
	back, err := l.Redrive()
	if err != nil {
		t.Fatal(err)
	}
	if back.Topic != "in" || string(back.Key) != "k" || string(back.Value) != "v" || len(back.Headers) != len(own) {
		t.Fatalf("redrive %+v", back)
	}
	for i, h := range back.Headers {
		if h.Key != own[i].Key || string(h.Value) != string(own[i].Value) {
			t.Errorf("redriven header %d = %s=%s, want %s=%s", i, h.Key, h.Value, own[i].Key, own[i].Value)
		}
	}

	row := (&DeadLetter{Stage: "relay", Reason: "payload_too_large", Source: SourceRoomOutbox, SourceID: 12, SourceTopic: "room-events",
		Key: []byte("room-1"), Extra: []kgo.RecordHeader{{Key: HeaderPayloadBytes, Value: []byte("9000000")}}}).Build("dlq")
	l, err = ParseDeadLetter(row)
	if err != nil || l.Source != SourceRoomOutbox || l.SourceID != 12 || l.HasOffset || l.SourceTopic != "room-events" {
		t.Fatalf("row letter %+v, %v", l, err)
	}
	if o, ok := l.Origin(); !ok || o != (Origin{Source: SourceRoomOutbox, SourceID: 12}) {
		t.Errorf("row origin %+v %v", o, ok)
	}
	var re *RedriveError
	if _, err := l.Redrive(); !errors.As(err, &re) || !strings.Contains(err.Error(), "no value (payload_too_large") {
		t.Errorf("redrive of a letter without a value: %v", err)
	}
	gap := (&DeadLetter{Stage: "relay", Reason: "gap_abandoned", Source: SourceRoomOutbox}).Build("dlq")
	l, err = ParseDeadLetter(gap)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := l.Origin(); ok {
		t.Error("a run of ids has no origin")
	}
	if _, err := l.Redrive(); !errors.As(err, &re) || !strings.Contains(err.Error(), "no source topic") {
		t.Errorf("redrive of a gap record: %v", err)
	}
	if _, err := ParseDeadLetter(from); !errors.Is(err, ErrNotDeadLetter) {
		t.Errorf("a plain record: %v, want ErrNotDeadLetter", err)
	}
	bad := (&DeadLetter{Stage: "room", Reason: "x", From: from}).Build("dlq")
	for i := range bad.Headers {
		if bad.Headers[i].Key == HeaderSourceOffset {
			bad.Headers[i].Value = []byte("12a")
		}
	}
	if _, err := ParseDeadLetter(bad); err == nil || !strings.Contains(err.Error(), "source_offset") {
		t.Errorf("a malformed source_offset: %v", err)
	}
}
