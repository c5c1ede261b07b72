package mic_test

import (
	"github.com/hyapp/roomflow/processors/mic"
	"github.com/hyapp/roomflow/schemas/userv1"
)

// goldenSessions are the mic session states of testdata/state-v1, whose
// bytes were written by the encoder of the release before state versions
// (version 1, unprefixed).
func goldenSessions() map[string]mic.Session {
	open := mic.Session{RoomID: "room-42", FirstSeatNo: 2, CurrentSeatNo: 5, Status: mic.StatusPublishing,
		SeatStartedAtMs: 1764547200000, PublishingStartedAtMs: 1764547203000, OpenedEventID: "evt-up",
		PublishEventID: "evt-pub", LastEventID: "evt-pub", LastRoomVersion: 17, CreatedAtMs: 1764547200100,
		UpdatedAtMs: 1764547203000, Version: 2}
	open.Recent[0], open.Recent[1] = mic.HashID("evt-up"), mic.HashID("evt-pub")
	ended := open
	ended.Status, ended.EndedAtMs, ended.EndReason = mic.StatusEnded, 1764550800000, "kick"
	ended.SeatOccupiedMs, ended.MicOnlineMs = 3600000, 3597000
	ended.ClosedEventID, ended.LastEventID, ended.LastRoomVersion, ended.Version = "evt-down", "evt-change", 19, 4
	ended.Recent[2], ended.Recent[3] = mic.HashID("evt-change"), mic.HashID("evt-down")
	return map[string]mic.Session{"session-open": open, "session-ended": ended, "session-tombstone": ended.Tombstone()}
}

var (
	goldenDayRooms  = mic.DayRooms{"room-1", "room-2"}
	goldenWatermark = int64(1764547200000)
)

// goldenLedger is the ledger entry of testdata/state-v1/ledger.bin.
func goldenLedger() *userv1.MicLedgerEntry {
	return &userv1.MicLedgerEntry{EventId: "evt-down", AppCode: "hyapp", EventType: "RoomMicChanged", UserId: 1234567,
		MicSessionId: "ms-1", Action: "down", RoomId: "room-42", Status: "consumed", OccurredAtMs: 1764550800000,
		Session: &userv1.MicSession{AppCode: "hyapp", MicSessionId: "ms-1", UserId: 1234567, RoomId: "room-42",
			FirstSeatNo: 2, CurrentSeatNo: 5, Status: "ended", SeatStartedAtMs: 1764547200000,
			PublishingStartedAtMs: 1764547203000, EndedAtMs: 1764550800000, EndReason: "kick", SeatOccupiedMs: 3600000,
			MicOnlineMs: 3597000, OpenedEventId: "evt-up", PublishEventId: "evt-pub", ClosedEventId: "evt-down",
			LastEventId: "evt-down", LastRoomVersion: 19, CreatedAtMs: 1764547200100, UpdatedAtMs: 1764550800000, Version: 4},
		Daily: []*userv1.MicDailyDelta{
			{StatDate: "2025-12-01", SeatOccupiedDeltaMs: 3600000, MicOnlineDeltaMs: 3597000, SessionCountDelta: 1,
				RoomCountDelta: 1, FirstMicAtMs: 1764547200000, LastMicAtMs: 1764550800000},
		},
		Lifetime: &userv1.MicLifetimeDelta{SeatOccupiedDeltaMs: 3600000, MicOnlineDeltaMs: 3597000,
			SessionCountDelta: 1, FirstMicAtMs: 1764547200000, LastMicAtMs: 1764550800000},
	}
}
