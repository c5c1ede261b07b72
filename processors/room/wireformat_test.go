package room_test

import (
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/schemareg"
	"github.com/hyapp/roomflow/internal/schemareg/srtest"
	"github.com/hyapp/roomflow/processors/room"
	"github.com/hyapp/roomflow/processors/room/roomtest"
	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/schemas/envelope"
)

// In kafka.public_wire_format confluent a LuckyPoolInflow is the plain
// mode's message framed under the topic's schema id, with the confluent
// content-type; the re-keyed mic events (internal) stay as they were. A
// Frames without the inflow topic's id is refused, never plain.
func TestConfluentWireFormat(t *testing.T) {
	e := newMemEnv(t)
	r := roomtest.Rule("rose", "v1", 50000, 200000, 300000)
	roomtest.InsertRule(t, e.m.DB, r)
	recs := []*kgo.Record{
		luckyRecord(e.topics.RoomEvents, luckyCase{eventID: "evt-1", roomID: "room-1", gift: r.GiftID, version: r.RuleVersion, heat: 1000}, 1),
		luckyRecord(e.topics.RoomEvents, luckyCase{eventID: "evt-2", roomID: "room-2", gift: r.GiftID, version: r.RuleVersion, heat: 77, drawID: "d"}, 2),
	}
	plain := e.drive(recs).Output(e.topics.LuckyPoolInflow)
	_, ids := srtest.Registry(t, config.Default().Kafka.Topics)
	e.cfg.Frames = schemareg.ConfluentFrames(ids)
	framed := e.drive(recs).Output(e.topics.LuckyPoolInflow)
	if len(plain) != 2 || len(framed) != 2 {
		t.Fatalf("%d plain, %d framed records", len(plain), len(framed))
	}
	for i, rec := range framed {
		if ct := string(envelope.Header(rec, envelope.HeaderContentType)); ct != envelope.ContentTypeConfluent {
			t.Fatalf("content-type %q", ct)
		}
		if body := srtest.Decode(t, rec.Value, ids[e.topics.LuckyPoolInflow], &activityv1.LuckyPoolInflow{}); string(body) != string(plain[i].Value) {
			t.Fatalf("record %d: framed message differs from the plain mode's", i)
		}
	}
	bad := e.cfg
	bad.Frames = schemareg.ConfluentFrames(map[string]int{"other": 1})
	if _, err := room.New(bad, e.rules); err == nil || !slices.Contains(cfgerr.Keys(err), "frames") {
		t.Fatalf("a Frames without the inflow topic's id must be refused (key frames): %v", err)
	}
}
