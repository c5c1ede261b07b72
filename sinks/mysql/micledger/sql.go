package micledger

import (
	"fmt"
	"strings"
)

var sessionCols = []string{
	"app_code", "mic_session_id", "user_id", "room_id", "first_seat_no", "current_seat_no", "status",
	"seat_started_at_ms", "publishing_started_at_ms", "ended_at_ms", "end_reason", "seat_occupied_ms",
	"mic_online_ms", "opened_event_id", "publish_event_id", "closed_event_id", "last_event_id",
	"last_room_version", "created_at_ms", "updated_at_ms", "snapshot_version",
}

// sessionUpsert replaces a stored snapshot only with a newer version.
// snapshot_version is assigned last: MySQL evaluates the assignments left
// to right, so the comparisons above it still see the old version.
var sessionHead, sessionTail, sessionRow = func() (string, string, string) {
	head := "INSERT INTO user_mic_sessions (" + strings.Join(sessionCols, ", ") + ") VALUES "
	var t strings.Builder
	t.WriteString(" ON DUPLICATE KEY UPDATE ")
	for _, c := range sessionCols[2 : len(sessionCols)-1] {
		fmt.Fprintf(&t, "%s = IF(VALUES(snapshot_version) > snapshot_version, VALUES(%s), %s), ", c, c, c)
	}
	t.WriteString("snapshot_version = GREATEST(snapshot_version, VALUES(snapshot_version))")
	return head, t.String(), "(" + strings.TrimSuffix(strings.Repeat("?,", len(sessionCols)), ",") + ")"
}()

const (
	dailyHead = "INSERT INTO user_mic_daily_stats (app_code, user_id, stat_date, seat_occupied_ms, mic_online_ms, session_count, room_count, first_mic_at_ms, last_mic_at_ms, updated_at_ms) VALUES "
	dailyTail = " ON DUPLICATE KEY UPDATE seat_occupied_ms = seat_occupied_ms + VALUES(seat_occupied_ms), " +
		"mic_online_ms = mic_online_ms + VALUES(mic_online_ms), session_count = session_count + VALUES(session_count), " +
		"room_count = room_count + VALUES(room_count), " + firstMicMin + ", " +
		"last_mic_at_ms = GREATEST(last_mic_at_ms, VALUES(last_mic_at_ms)), updated_at_ms = GREATEST(updated_at_ms, VALUES(updated_at_ms))"
	lifetimeHead = "INSERT INTO user_mic_lifetime_stats (app_code, user_id, seat_occupied_ms, mic_online_ms, session_count, first_mic_at_ms, last_mic_at_ms, updated_at_ms) VALUES "
	lifetimeTail = " ON DUPLICATE KEY UPDATE seat_occupied_ms = seat_occupied_ms + VALUES(seat_occupied_ms), " +
		"mic_online_ms = mic_online_ms + VALUES(mic_online_ms), session_count = session_count + VALUES(session_count), " +
		firstMicMin + ", " +
		"last_mic_at_ms = GREATEST(last_mic_at_ms, VALUES(last_mic_at_ms)), updated_at_ms = GREATEST(updated_at_ms, VALUES(updated_at_ms))"
	// firstMicMin is MIN ignoring 0 (0 means "not set").
	firstMicMin = "first_mic_at_ms = IF(VALUES(first_mic_at_ms) = 0, first_mic_at_ms, IF(first_mic_at_ms = 0, VALUES(first_mic_at_ms), LEAST(first_mic_at_ms, VALUES(first_mic_at_ms))))"
)
