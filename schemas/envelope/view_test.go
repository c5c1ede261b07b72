package envelope

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/schemas/roomv1"
)

func randString(rng *rand.Rand) string {
	b := make([]byte, rng.IntN(12))
	for i := range b {
		b[i] = byte('a' + rng.IntN(26))
	}
	if rng.IntN(20) == 0 {
		return string(b) + "é"
	}
	return string(b)
}

func validEnvelope(rng *rand.Rand) []byte {
	mic, _ := proto.Marshal(&roomv1.RoomMicChanged{UserId: rng.Int64N(1 << 40), SeatNo: int32(rng.IntN(9)), Action: randString(rng),
		MicSessionId: randString(rng), PublishState: randString(rng), Reason: randString(rng), PublishDeadlineMs: rng.Int64(),
		PreviousSeatNo: -1, RtcStoppedAtMs: rng.Int64N(100)})
	b, _ := proto.Marshal(&roomv1.EventEnvelope{EventId: randString(rng), EventType: "RoomMicChanged", AppCode: randString(rng),
		RoomId: randString(rng), RoomVersion: rng.Int64(), OccurredAtMs: rng.Int64(), RequestId: randString(rng),
		CommandId: randString(rng), Payload: mic})
	if rng.IntN(4) == 0 { // an unknown field and a repeated scalar (last wins)
		b = protowire.AppendTag(b, 15, protowire.BytesType)
		b = protowire.AppendBytes(b, []byte("future"))
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, "override")
	}
	if rng.IntN(8) == 0 { // a known field with an unexpected wire type
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		b = protowire.AppendVarint(b, 7)
	}
	return b
}

func mutate(rng *rand.Rand, b []byte) []byte {
	b = bytes.Clone(b)
	switch rng.IntN(5) {
	case 0:
		return b
	case 1:
		return b[:rng.IntN(len(b)+1)]
	case 2:
		if len(b) > 0 {
			b[rng.IntN(len(b))] ^= byte(1 << rng.IntN(8))
		}
		return b
	case 3:
		i := rng.IntN(len(b) + 1)
		return append(b[:i], append([]byte{byte(rng.IntN(256))}, b[i:]...)...)
	default:
		if len(b) > 0 {
			b[rng.IntN(len(b))] = 0xff
		}
		return b
	}
}

// TestViewsMatchProtoUnmarshal runs the checks of FuzzView on 100,000
// valid and mutated envelopes and payloads (deterministic, every run).
func TestViewsMatchProtoUnmarshal(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	accepted, rejected := 0, 0
	for range 100000 {
		b := mutate(rng, validEnvelope(rng))
		checkEnvelope(t, b)
		var v View
		if v.Parse(b) != nil {
			rejected++
			continue
		}
		accepted++
		p := mutate(rng, v.Payload)
		checkMic(t, p)
		checkGift(t, p)
	}
	if accepted < 10000 || rejected < 10000 {
		t.Fatalf("mutations not varied enough: %d accepted, %d rejected", accepted, rejected)
	}
}

func BenchmarkParseEnvelope(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	in := validEnvelope(rng)
	var v View
	var m MicChanged
	b.ReportAllocs()
	for b.Loop() {
		if err := v.Parse(in); err != nil {
			b.Fatal(err)
		}
		if err := m.Parse(v.Payload); err != nil {
			b.Fatal(err)
		}
	}
}
