package envelope_test

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/schemas/envelope"
)

// One topic holding plain records (today's, with and without the plain
// content-type) and framed ones (with and without the header): every one
// reads as its message, and the plain path allocates nothing.
func TestPayloadMixedRecords(t *testing.T) {
	msg, _ := proto.Marshal(&activityv1.LuckyRewardPending{EventId: "LuckyRewardPending:r1", RewardCoins: 7})
	md := (&activityv1.LuckyRewardPending{}).ProtoReflect().Descriptor()
	f := envelope.Confluent(42, md)
	framed := append(append([]byte(nil), f.Prefix...), msg...)
	recs := []*kgo.Record{
		{Value: msg},
		{Value: msg, Headers: envelope.AppendHeaders(nil, nil, nil, nil)},
		{Value: msg, Headers: []kgo.RecordHeader{{Key: envelope.HeaderContentType}}}, // empty: plain
		{Value: framed},
		{Value: framed, Headers: envelope.AppendHeadersAs(nil, nil, nil, nil, f.Header())},
	}
	for i, r := range recs {
		got, err := envelope.Payload(r)
		var out activityv1.LuckyRewardPending
		if err != nil || proto.Unmarshal(got, &out) != nil || out.GetRewardCoins() != 7 {
			t.Errorf("record %d: %v %v", i, err, &out)
		}
	}
	id, idx, body, err := envelope.Unframe(framed)
	if err != nil || id != 42 || len(idx) != 1 || idx[0] != md.Index() || string(body) != string(msg) {
		t.Fatalf("Unframe = %d %v %v", id, idx, err)
	}
	for i, r := range recs {
		if n := testing.AllocsPerRun(100, func() { envelope.Payload(r) }); n != 0 {
			t.Errorf("record %d: Payload allocates %v times", i, n)
		}
	}
}

// The short form [0] and a nested path both round-trip.
func TestConfluentPrefixIndexes(t *testing.T) {
	for _, idx := range [][]int{{0}, {3}, {1, 2}, {0, 0, 5}} {
		p := envelope.AppendConfluentPrefix(nil, 7, idx)
		_, got, rest, err := envelope.Unframe(append(p, 0x08, 0x01))
		if err != nil || len(got) != len(idx) || len(rest) != 2 {
			t.Fatalf("%v: %v %v", idx, got, err)
		}
		for i := range idx {
			if got[i] != idx[i] {
				t.Fatalf("%v: got %v", idx, got)
			}
		}
	}
	if p := envelope.AppendConfluentPrefix(nil, 1, []int{0}); len(p) != 6 || p[5] != 0 {
		t.Fatalf("[0] must be the one byte 0: % x", p)
	}
}

// A value that claims the framing and does not hold it is an error, never
// read as a message.
func TestPayloadBadFraming(t *testing.T) {
	ct := envelope.Confluent(1, (&activityv1.LuckyPoolInflow{}).ProtoReflect().Descriptor()).Header()
	for name, r := range map[string]*kgo.Record{
		"short":          {Value: []byte{0, 0, 0}},
		"header no zero": {Value: []byte{8, 1, 2, 3, 4, 5, 6}, Headers: []kgo.RecordHeader{{Key: envelope.HeaderContentType, Value: ct}}},
		"bad count":      {Value: []byte{0, 0, 0, 0, 1, 0x80}},
		"huge count":     {Value: []byte{0, 0, 0, 0, 1, 0x7e}},
		"negative index": {Value: []byte{0, 0, 0, 0, 1, 2, 1}},
	} {
		if _, err := envelope.Payload(r); !errors.Is(err, envelope.ErrFraming) {
			t.Errorf("%s: err = %v, want ErrFraming", name, err)
		}
	}
}
