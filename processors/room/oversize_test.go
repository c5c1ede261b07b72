package room_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/processors/room"
	"github.com/hyapp/roomflow/processors/room/roomtest"
	"github.com/hyapp/roomflow/processors/streams"
	"github.com/hyapp/roomflow/processors/streams/rttest"
	"github.com/hyapp/roomflow/schemas/envelope"
	"github.com/hyapp/roomflow/schemas/roomv1"
)

// TestRecordsAtTheRelayBound: the relay writes room events up to 1 MiB
// (relay.max_record_bytes). A valid mic event that large is forwarded;
// garbage that large is dead-lettered without its value (the letter would
// be refused with it; payload_bytes keeps its size), and so is a mic event
// whose forward, its app_code filled in, would be above the bound
// (output_too_large). None wedges the processor: the room's next event
// still flows.
func TestRecordsAtTheRelayBound(t *testing.T) {
	e := newEnv(t)
	const roomID = "room-big"
	big := roomtest.Envelope("evt-big", "RoomMicChanged", roomID, 1, 1,
		&roomv1.RoomMicChanged{UserId: 5, Action: "down", MicSessionId: "s-big", Reason: strings.Repeat("x", 1_020_000)})
	garbage := append([]byte{0xff, 0xff, 0xff, 0xff}, strings.Repeat("z", 1_048_300)...)
	// Without app_code: the forward appends it, past the bound. (One user,
	// so the forwards share a partition and keep their order.)
	huge, _ := proto.Marshal(&roomv1.EventEnvelope{EventId: "evt-huge", EventType: "RoomMicChanged", RoomId: roomID,
		Payload: mustMarshal(&roomv1.RoomMicChanged{UserId: 5, Action: "down", MicSessionId: "s-huge", Reason: strings.Repeat("y", 1_048_300)})})
	next := roomtest.Envelope("evt-next", "RoomMicChanged", roomID, 2, 2, &roomv1.RoomMicChanged{UserId: 5, Action: "up", MicSessionId: "s-next"})
	rttest.Produce(t, e.k.Client(t, kgo.ProducerBatchMaxBytes(1<<20)), []*kgo.Record{
		{Topic: e.topics.RoomEvents, Key: []byte(roomID), Value: big},
		{Topic: e.topics.RoomEvents, Key: []byte(roomID), Value: garbage},
		{Topic: e.topics.RoomEvents, Key: []byte(roomID), Value: huge},
		{Topic: e.topics.RoomEvents, Key: []byte(roomID), Value: next},
	})
	rt, err := room.New(fast(e.cfg, testenv.UniqueName(t)), e.rules)
	if err != nil {
		t.Fatal(err)
	}
	r := rttest.Start(rt)
	mics := rttest.ReadCommitted(t, e.k.Brokers, e.topics.UserMicEvents, 2, time.Second, 30*time.Second)
	dlq := rttest.ReadCommitted(t, e.k.Brokers, e.topics.DLQ, 2, time.Second, 10*time.Second)
	r.Stop(t)
	if len(mics) != 2 || rttest.Header(mics[0], "event_id") != "evt-big" || rttest.Header(mics[1], "event_id") != "evt-next" ||
		string(mics[0].Value) != string(big) {
		t.Fatalf("%d mic events forwarded, want evt-big unchanged then evt-next", len(mics))
	}
	want := []struct{ reason, offset, size string }{
		{room.ReasonDecodeEnvelope, "1", strconv.Itoa(len(garbage))},
		{streams.ReasonOutputTooLarge, "2", strconv.Itoa(len(huge))},
	}
	if len(dlq) != len(want) {
		t.Fatalf("%d dead letters, want %d", len(dlq), len(want))
	}
	for i, w := range want {
		d := dlq[i]
		if rttest.Header(d, envelope.HeaderErrorReason) != w.reason || rttest.Header(d, envelope.HeaderSourceOffset) != w.offset ||
			len(d.Value) != 0 || rttest.Header(d, envelope.HeaderPayloadBytes) != w.size {
			t.Errorf("dead letter %d: reason %q, offset %q, %d value bytes, payload_bytes %q; want %v without its value",
				i, rttest.Header(d, envelope.HeaderErrorReason), rttest.Header(d, envelope.HeaderSourceOffset), len(d.Value), rttest.Header(d, envelope.HeaderPayloadBytes), w)
		}
	}
}

func mustMarshal(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

// The in-memory driver refuses such an output as the runtime does.
func TestOutputTooLargeInMemory(t *testing.T) {
	e := newMemEnv(t)
	huge, _ := proto.Marshal(&roomv1.EventEnvelope{EventId: "evt-huge", EventType: "RoomMicChanged", RoomId: "r1",
		Payload: mustMarshal(&roomv1.RoomMicChanged{UserId: 7, Action: "down", MicSessionId: "s", Reason: strings.Repeat("y", streams.MaxRecordBytes)})})
	d := e.drive([]*kgo.Record{{Topic: e.topics.RoomEvents, Key: []byte("r1"), Value: huge}})
	if dl := d.DeadLetters(); len(dl) != 1 || dl[0].Reason != streams.ReasonOutputTooLarge || len(d.Output(e.topics.UserMicEvents)) != 0 {
		t.Fatalf("dead letters %v, want one output_too_large and no forward", dl)
	}
}
