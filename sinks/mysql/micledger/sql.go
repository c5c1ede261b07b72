package micledger

import (
	"fmt"
	"strings"
)

// Tables names the fact tables WriteFacts writes: the sink's own
// (FactTables), or fresh copies a rebuild fills (sinks/mysql/rebuild)
// with the same statements before it swaps them in.
type Tables struct {
	Sessions, Daily, Lifetime string
}

// FactTables are the mic fact tables of MIC-8.
var FactTables = Tables{Sessions: "user_mic_sessions", Daily: "user_mic_daily_stats", Lifetime: "user_mic_lifetime_stats"}

// List is the tables in a stable order.
func (t Tables) List() []string { return []string{t.Sessions, t.Daily, t.Lifetime} }

var sessionCols = []string{
	"app_code", "mic_session_id", "user_id", "room_id", "first_seat_no", "current_seat_no", "status",
	"seat_started_at_ms", "publishing_started_at_ms", "ended_at_ms", "end_reason", "seat_occupied_ms",
	"mic_online_ms", "opened_event_id", "publish_event_id", "closed_event_id", "last_event_id",
	"last_room_version", "created_at_ms", "updated_at_ms", "snapshot_version",
}

// statements are the upserts of one Tables.
type statements struct {
	sessionHead, sessionTail, sessionRow string
	dailyHead, dailyTail                 string
	lifetimeHead, lifetimeTail           string
}

// factStatements are FactTables' statements, built once for the sink.
var factStatements = FactTables.statements()

func (t Tables) statements() statements {
	var s statements
	// The session upsert replaces a stored snapshot only with a newer
	// version. snapshot_version is assigned last: MySQL evaluates the
	// assignments left to right, so the comparisons above it still see the
	// old version.
	s.sessionHead = "INSERT INTO " + t.Sessions + " (" + strings.Join(sessionCols, ", ") + ") VALUES "
	var tail strings.Builder
	tail.WriteString(" ON DUPLICATE KEY UPDATE ")
	for _, c := range sessionCols[2 : len(sessionCols)-1] {
		fmt.Fprintf(&tail, "%s = IF(VALUES(snapshot_version) > snapshot_version, VALUES(%s), %s), ", c, c, c)
	}
	tail.WriteString("snapshot_version = GREATEST(snapshot_version, VALUES(snapshot_version))")
	s.sessionTail = tail.String()
	s.sessionRow = "(" + strings.TrimSuffix(strings.Repeat("?,", len(sessionCols)), ",") + ")"

	s.dailyHead = "INSERT INTO " + t.Daily + " (app_code, user_id, stat_date, seat_occupied_ms, mic_online_ms, session_count, room_count, first_mic_at_ms, last_mic_at_ms, updated_at_ms) VALUES "
	s.dailyTail = " ON DUPLICATE KEY UPDATE seat_occupied_ms = seat_occupied_ms + VALUES(seat_occupied_ms), " +
		"mic_online_ms = mic_online_ms + VALUES(mic_online_ms), session_count = session_count + VALUES(session_count), " +
		"room_count = room_count + VALUES(room_count), " + firstMicMin + ", " +
		"last_mic_at_ms = GREATEST(last_mic_at_ms, VALUES(last_mic_at_ms)), updated_at_ms = GREATEST(updated_at_ms, VALUES(updated_at_ms))"
	s.lifetimeHead = "INSERT INTO " + t.Lifetime + " (app_code, user_id, seat_occupied_ms, mic_online_ms, session_count, first_mic_at_ms, last_mic_at_ms, updated_at_ms) VALUES "
	s.lifetimeTail = " ON DUPLICATE KEY UPDATE seat_occupied_ms = seat_occupied_ms + VALUES(seat_occupied_ms), " +
		"mic_online_ms = mic_online_ms + VALUES(mic_online_ms), session_count = session_count + VALUES(session_count), " +
		firstMicMin + ", " +
		"last_mic_at_ms = GREATEST(last_mic_at_ms, VALUES(last_mic_at_ms)), updated_at_ms = GREATEST(updated_at_ms, VALUES(updated_at_ms))"
	return s
}

// firstMicMin is MIN ignoring 0 (0 means "not set").
const firstMicMin = "first_mic_at_ms = IF(VALUES(first_mic_at_ms) = 0, first_mic_at_ms, IF(first_mic_at_ms = 0, VALUES(first_mic_at_ms), LEAST(first_mic_at_ms, VALUES(first_mic_at_ms))))"
