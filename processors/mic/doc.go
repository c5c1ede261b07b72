// Package mic is the pure domain of user mic online time (MIC-1 to MIC-11 in
// docs/requirements.md): the per-session state machine (up ->
// publish_confirmed -> change* -> down), the UTC day split of seat and
// mic-online time, the ledger entry every input event yields, the derived
// public events of a close, the timer (open session compensation) closes,
// and event-id dedupe.
//
// Nothing here talks to Kafka or MySQL. The engine reads and writes keyed
// state through the small State interface; the stream adapter in
// processors/mic/micproc backs it with the exactly-once runtime's changelog
// store, and tests back it with a map. Time enters only explicitly: an
// input event carries its own times, and a timer close is given "now".
//
// Decisions the requirements and design leave to the implementation
// (documented where they are applied):
//   - A repeated event_id already applied to the session (the session keeps
//     the ids it applied, its last few as 64-bit hashes, also in the closed
//     tombstone) yields no output at all: no ledger entry, no derived event.
//     The sink dedupes by event_id as a second line of defence.
//   - Skipped entries (status "skipped") carry no session snapshot and no
//     deltas: they only record the consumption outcome.
//   - "up" for a session that is already open is skipped as stale_event;
//     "publish_confirmed" for a session already publishing is skipped as
//     stale_event (the first confirmation wins); any event whose room_version
//     is lower than the last applied one of its session is stale_event.
//   - A session of zero seat time counts (session_count, room_count) on the
//     UTC day it started, so daily session counts cover every session.
//   - A day's last_mic_at_ms is min(ended_at, end of day - 1ms): inside the day.
//   - A session's accountable window is capped at MaxSessionSpanMs (400
//     days) as a guard against corrupt timestamps; the timers close real
//     sessions long before that.
//   - Timer closes stamp the ledger entry's occurred_at_ms and the rows'
//     updated_at_ms with the tick's wall-clock time; the close itself (end
//     time, durations) depends only on the session. The ledger action of a
//     timer close is "compensate".
//   - Closed-session tombstones and the per user-day room sets are retained
//     by event time (a partition watermark), not wall-clock time: see
//     Retention. A duplicate arriving later than mic.closed_session_retention
//     (in event time) after its session closed is no longer recognised as a
//     duplicate: a late down is then unknown_session, and an up that old is
//     refused as stale_event (Retention.TooOld), so neither counts twice.
//   - A user's current totals (Totals, issue 35) live in one state key per
//     user beside the sessions; Totals.Add applies a close's deltas with the
//     sink's rules, and a day out of TotalsWindow (older than the bootstrap's
//     first day, or past mic.day_totals_retention in event time) gets no
//     total again, never one counted from 0.
//   - mic_session_id is limited to 128 bytes, its column's size (MIC-4);
//     longer ids are rejected to the DLQ. The timer close's event id
//     "MicSessionCompensated:{mic_session_id}" is then up to 150 bytes:
//     migration 0008 widens the event-id columns it is stored in to 160
//     (MaxDerivedEventIDLen).
package mic
