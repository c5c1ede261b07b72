package purge_test

import (
	"strings"
	"testing"

	"github.com/hyapp/roomflow/producers/relay"
	"github.com/hyapp/roomflow/sinks/mysql/retention"
	"github.com/hyapp/roomflow/tools/purge"
)

// The table names what was deleted (or would be), before when, and why a
// table was skipped or up to which room_outbox id.
func TestPrint(t *testing.T) {
	res := []retention.TableResult{
		{Table: retention.UserMicEventConsumption, Rows: 12, BeforeMs: 0},
		{Table: retention.RoomOutbox, Rows: 3, BeforeMs: 86_400_000, BelowID: 42},
		{Table: retention.LuckyRoomStatsHourly, Skipped: "purge.lucky_room_stats_hourly is 0"},
	}
	var b strings.Builder
	purge.Print(&b, res, true)
	want := "TABLE                       WOULD_DELETE  OLDER_THAN            NOTE\n" +
		"user_mic_event_consumption  12            1970-01-01T00:00:00Z  \n" +
		"room_outbox                 3             1970-01-02T00:00:00Z  delivered, id < 42\n" +
		"lucky_room_stats_hourly     0             -                     purge.lucky_room_stats_hourly is 0\n"
	if b.String() != want {
		t.Errorf("dry run table:\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	purge.Print(&b, nil, false)
	if b.String() != "TABLE  DELETED  OLDER_THAN  NOTE\n" {
		t.Errorf("empty pass: %q", b.String())
	}
}

// retention cannot import the relay (the import rule): its copy of how far
// ahead the relay stamps room events must follow the relay's.
func TestRoomEventsFutureSkewIsTheRelays(t *testing.T) {
	if retention.RoomEventsFutureSkew != relay.MaxFutureSkew {
		t.Errorf("retention.RoomEventsFutureSkew %s, relay.MaxFutureSkew %s", retention.RoomEventsFutureSkew, relay.MaxFutureSkew)
	}
}
