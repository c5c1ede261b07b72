package main

import (
	"bytes"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestReplayRoundTrip: rawo emits every captured record byte for byte
// (key, value, a tombstone's nil value, headers) to its topic's copy, again
// on every pass.
func TestReplayRoundTrip(t *testing.T) {
	recs := []*kgo.Record{
		{Key: []byte("42"), Value: []byte("ledger entry"), Headers: []kgo.RecordHeader{
			{Key: "event_id", Value: []byte("e1")}, {Key: "content-type", Value: []byte("application/x-protobuf")}}},
		{Key: []byte("s\x05hyapp"), Value: nil}, // a changelog tombstone
		{Key: []byte("7"), Value: []byte{}, Headers: []kgo.RecordHeader{{Key: "empty"}}},
	}
	var data []byte
	for _, r := range recs {
		data = appendReplayRecord(data, r)
	}
	tp := replayTopic{to: "t.rawo", data: data}
	headers := func(n int) []kgo.RecordHeader { return make([]kgo.RecordHeader, n) }
	for round := range 2 {
		tp.off = 0
		for i, want := range recs {
			var got kgo.Record
			tp.next(&got, headers)
			if got.Topic != "t.rawo" || !bytes.Equal(got.Key, want.Key) || !bytes.Equal(got.Value, want.Value) ||
				(got.Value == nil) != (want.Value == nil) || len(got.Headers) != len(want.Headers) {
				t.Fatalf("round %d record %d: got %+v, want %+v", round, i, got, *want)
			}
			for j, h := range want.Headers {
				if got.Headers[j].Key != h.Key || !bytes.Equal(got.Headers[j].Value, h.Value) {
					t.Fatalf("round %d record %d header %d: got %+v, want %+v", round, i, j, got.Headers[j], h)
				}
			}
		}
		if tp.off != len(data) {
			t.Fatalf("round %d: ended at %d of %d bytes", round, tp.off, len(data))
		}
	}
}
