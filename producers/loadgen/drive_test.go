package loadgen

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/testenv"
)

func TestLoadTimeOf(t *testing.T) {
	l := Load{Rate: 100, Ramp: 10 * time.Second}
	for _, tc := range []struct {
		events float64
		want   time.Duration
	}{
		{0, 0},
		{125, 5 * time.Second}, // a quarter of the ramp's 500 events at half its length
		{500, 10 * time.Second},
		{1500, 20 * time.Second},
	} {
		if got := l.timeOf(tc.events); got.Round(time.Millisecond) != tc.want {
			t.Errorf("timeOf(%v) = %s, want %s", tc.events, got, tc.want)
		}
	}
	if got := (Load{Rate: 100}).timeOf(250); got != 2500*time.Millisecond {
		t.Errorf("without a ramp: timeOf(250) = %s, want 2.5s", got)
	}
}

// Under concurrent writers, late commits and batches, every room's rows are
// serial: each inserted after the previous one of its room committed, so
// outbox ids rise with room_version in every room, while the held
// transactions make ids commit out of order across rooms. Every event is
// written, none twice, and the oracle fed by Drive equals the one of the
// rows.
func TestDriveKeepsRoomsSerial(t *testing.T) {
	m := testenv.NewMySQL(t)
	sc := DefaultScenario()
	sc.Rooms, sc.Users, sc.EventIDPrefix, sc.Start = 8, 300, "serial", time.Now()
	ld := DefaultLoad()
	ld.Duration, ld.Rate, ld.Writers, ld.Batch = 3*time.Second, 400, 4, 5
	ld.LateCommitShare, ld.LateCommitHold, ld.MalformedShare = 0.2, 150*time.Millisecond, 0.05
	ld.SessionMedian, ld.SessionP99 = time.Second, 4*time.Second
	rules := map[RuleKey]LuckyRule{{sc.Rule.GiftID, sc.Rule.RuleVersion}: sc.Rule}
	b := NewOracleBuilder(rules, sc.AppCode, nil)
	var committed atomic.Int64
	sum, err := Drive(context.Background(), NewStream(sc, ld), DriveConfig{Load: ld, Writer: OutboxWriter{DB: m.DB}, Oracle: b,
		Committed: func(c Commit) { committed.Add(int64(len(c.Events))) }})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Written < 600 || sum.LateCommits == 0 || sum.Malformed == 0 || sum.Written != sum.Due || committed.Load() != sum.Written {
		t.Fatalf("summary %+v, %d rows reported committed", sum, committed.Load())
	}
	rows, err := m.DB.Query("SELECT id, room_id, room_version, payload FROM room_outbox ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	last := map[string]int64{}
	rebuilt := NewOracleBuilder(rules, sc.AppCode, nil)
	n := 0
	for rows.Next() {
		var id, version int64
		var room string
		var payload []byte
		if err := rows.Scan(&id, &room, &version, &payload); err != nil {
			t.Fatal(err)
		}
		if version != last[room]+1 {
			t.Fatalf("row %d: %s version %d after %d: a room's rows must be inserted in order", id, room, version, last[room])
		}
		last[room] = version
		rebuilt.Add(payload)
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != int(sum.Written) {
		t.Fatalf("%d rows, %d written", n, sum.Written)
	}
	want, got := b.Oracle(), rebuilt.Oracle()
	if want.Events != got.Events || want.ClosedSessions != got.ClosedSessions || len(want.Lifetime) != len(got.Lifetime) || want.LuckyGifts != got.LuckyGifts {
		t.Fatalf("oracle fed by Drive %+v, of the rows %+v", want, got)
	}
}

// SessionCheck compares each closed session with its user_mic_sessions row
// (over more than one batch), reports a row no closed session accounts for
// by its user's row count, and leaves out users with open sessions.
func TestSessionCheck(t *testing.T) {
	m := testenv.NewMySQL(t)
	insert := func(id string, user, seat, end int64, reason string) {
		t.Helper()
		if _, err := m.DB.Exec(`INSERT INTO user_mic_sessions (app_code, mic_session_id, user_id, room_id, status, seat_started_at_ms,
			ended_at_ms, end_reason, seat_occupied_ms, opened_event_id, last_event_id, created_at_ms, updated_at_ms)
			VALUES ('a', ?, ?, 'r', 'ended', ?, ?, ?, ?, 'o', 'l', 1, 1)`, id, user, seat, end, reason, end-seat); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	check := NewSessionCheck(m.DB, "a")
	for i := range sessionCheckBatch + 10 {
		id := fmt.Sprint("s", i)
		insert(id, int64(1+i%7), 1000, 2000, "leave")
		s := MicSession{ID: id, UserID: int64(1 + i%7), SeatStartMs: 1000, EndMs: 2000, EndReason: "leave"}
		if i == 3 {
			s.EndReason = "kick" // MySQL says leave
		}
		check.Add(ctx, s)
	}
	insert("extra", 100, 1000, 2000, "leave")     // no session of the log
	insert("open-user", 200, 1000, 2000, "leave") // user 200 has an open session: skipped
	o := &Oracle{OpenSessions: map[string]MicSession{"o": {ID: "o", UserID: 200}}}
	var rep Report
	if err := check.Finish(ctx, o, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.SessionRows != sessionCheckBatch+10 || len(rep.Diffs) != 2 || rep.Diffs[0].Key != "s3" || rep.Diffs[1].Key != "100" {
		t.Fatalf("%d rows compared, diffs %v", rep.SessionRows, rep.Diffs)
	}
}
