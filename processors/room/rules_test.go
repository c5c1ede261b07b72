package room_test

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/processors/room"
	"github.com/hyapp/roomflow/processors/room/roomtest"
	"github.com/hyapp/roomflow/processors/streams/rttest"
	"github.com/hyapp/roomflow/schemas/roomv1"
)

// TestRuleIDsAreByteExact: a lucky gift names its rule by bytes, as every
// stage keys gift ids: "ROSE", "V1" and "v1 " are not rose's version v1,
// though lucky_gift_rules' collation (case-insensitive, padding spaces)
// matches them. Each is an unknown rule version, never an inflow at
// rose's rates into a pool no draw of rose uses.
func TestRuleIDsAreByteExact(t *testing.T) {
	e := newMemEnv(t)
	roomtest.InsertRule(t, e.m.DB, roomtest.Rule("rose", "v1", 50000, 200000, 300000))
	var recs []*kgo.Record
	for i, gv := range [][2]string{{"ROSE", "v1"}, {"rose", "V1"}, {"rose", "v1 "}, {"rose", "v1"}} {
		v := roomtest.Gift("evt-"+string(rune('a'+i)), "room-1", int64(i+1),
			&roomv1.RoomGiftSent{GiftId: gv[0], Lucky: true, LuckyRuleVersion: gv[1], HeatValue: 1000})
		recs = append(recs, &kgo.Record{Topic: e.topics.RoomEvents, Key: []byte("room-1"), Value: v})
	}
	d := e.drive(recs)
	dlq, inflow := d.DeadLetters(), d.Output(e.topics.LuckyPoolInflow)
	for i, dl := range dlq {
		if dl.Reason != room.ReasonUnknownRuleVersion {
			t.Errorf("DLQ[%d] (offset %d): reason %q (%v), want %q", i, dl.Record.Offset, dl.Reason, dl.Err, room.ReasonUnknownRuleVersion)
		}
	}
	if len(dlq) != 3 || len(inflow) != 1 || rttest.Header(inflow[0], "event_id") != "LuckyPoolInflow:evt-d" {
		var ids []string
		for _, r := range inflow {
			ids = append(ids, rttest.Header(r, "event_id"))
		}
		t.Fatalf("%d dead letters and inflows %v, want 3 and only evt-d's", len(dlq), ids)
	}
}
