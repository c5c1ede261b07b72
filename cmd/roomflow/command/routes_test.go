package command

import (
	"strings"
	"testing"
)

// TestRoutesCannotStarveAStage: a relay.routes entry for a type the room
// processor or the IM publisher reads from kafka.topics.room_events stops
// every command at start, naming the key and the stage; routes of no-op
// types, or to the room events topic itself, are accepted.
func TestRoutesCannotStarveAStage(t *testing.T) {
	for _, c := range []struct {
		routes, cmd, want string
	}{
		{"RoomMicChanged: hyapp.mic.v1", "config",
			"config: relay.routes.RoomMicChanged: consumed by the room processor from kafka.topics.room_events; routing it elsewhere would hide it"},
		{"RoomGiftSent: hyapp.gifts.v1", "relay",
			"config: relay.routes.RoomGiftSent: consumed by the room processor from kafka.topics.room_events"},
		{"RoomUserJoined: hyapp.joins.v1", "publish-im",
			"config: relay.routes.RoomUserJoined: consumed by the IM publisher from kafka.topics.room_events"},
		{"RoomPkStarted: hyapp.pk.v1", "migrate", // unknown types reach IM with their raw payload
			"config: relay.routes.RoomPkStarted: consumed by the IM publisher"},
	} {
		_, err := runCLI(t, "relay:\n  routes:\n    "+c.routes+"\n", c.cmd)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s with route %s: got %v, want %q", c.cmd, c.routes, err, c.want)
		}
	}
	ok := "relay:\n  routes:\n    RoomHeatChanged: hyapp.heat.v1\n    RoomRankChanged: hyapp.rank.v1\n    RoomMicChanged: hyapp.room.events.v1\n"
	if out, err := runCLI(t, ok, "config"); err != nil || !strings.Contains(out, "hyapp.heat.v1") {
		t.Fatalf("routes of no-op types and to room_events itself must pass: %v\n%s", err, out)
	}
}
