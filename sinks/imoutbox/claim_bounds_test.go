package imoutbox_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/sinks/imoutbox"
)

// claimedIDs claims with ClaimPendingOf and returns the event ids, sorted.
func claimedIDs(t *testing.T, repo *imoutbox.Repo, limit int, grace time.Duration, keep func(string) bool, spread int) []string {
	t.Helper()
	rows, err := repo.ClaimPendingOf(context.Background(), "w1", limit, grace, time.Minute, keep, spread)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, r.EventID)
	}
	slices.Sort(got)
	return got
}

// TestClaimPendingSkipsFreshRowsBeforeTheLimit: the candidate read leaves
// out pending rows younger than the grace, so a fresh row first in index
// order does not take the only slot of a limit of 1 from an older one.
func TestClaimPendingSkipsFreshRowsBeforeTheLimit(t *testing.T) {
	e := newEnv(t, false)
	e.insert(0, gift("fresh", "room-1", 1))
	e.insert(time.Minute, gift("old", "room-2", 1))
	if got := claimedIDs(t, imoutbox.NewRepo(e.db), 1, 5*time.Second, nil, 1); !slices.Equal(got, []string{"old"}) {
		t.Fatalf("claimed %v, want [old]", got)
	}
}

// TestClaimPendingOfReadsLimitTimesSpread: a replica that keeps 1/spread
// of the rooms reads limit × spread candidates per branch, so rows of its
// own rooms behind other rooms' rows are still found; it keeps and locks
// at most limit of them per branch.
func TestClaimPendingOfReadsLimitTimesSpread(t *testing.T) {
	e := newEnv(t, false)
	e.insert(time.Minute, gift("a-1", "room-a", 1), gift("a-2", "room-a", 2), gift("b-1", "room-b", 1))
	onlyB := func(room string) bool { return room == "room-b" }
	if got := claimedIDs(t, imoutbox.NewRepo(e.db), 1, time.Second, onlyB, 3); !slices.Equal(got, []string{"b-1"}) {
		t.Fatalf("claimed %v, want [b-1]", got)
	}

	e.insert(time.Minute, gift("c-1", "room-c", 1), gift("c-2", "room-c", 2), gift("c-3", "room-c", 3), gift("c-4", "room-c", 4))
	var locked []int
	db := testenv.OpenHooked(t, e.m.DSN, testenv.SQLHooks{Statement: func(_ context.Context, q string) error {
		if strings.Contains(q, "FOR UPDATE SKIP LOCKED") {
			in := q[strings.Index(q, "IN (")+4:]
			locked = append(locked, strings.Count(in[:strings.Index(in, ")")], "?"))
		}
		return nil
	}})
	all := func(string) bool { return true }
	if got := claimedIDs(t, imoutbox.NewRepo(db), 2, time.Second, all, 3); !slices.Equal(got, []string{"a-1", "a-2"}) {
		t.Fatalf("claimed %v, want [a-1 a-2]", got)
	}
	if !slices.Equal(locked, []int{2}) {
		t.Fatalf("locking reads of %v rows, want one of 2 (limit per branch)", locked)
	}
}

// TestClaimEventsWithNothingToClaim: a fast-path claim whose rows are all
// delivered, held by another worker (up to the last millisecond of its
// lock) or missing changes nothing and is no error.
func TestClaimEventsWithNothingToClaim(t *testing.T) {
	e := newEnv(t, false)
	e.insert(0, gift("delivered", "room-1", 1), gift("busy", "room-2", 1))
	if _, err := e.db.Exec("UPDATE room_outbox SET status = 'delivered' WHERE event_id = 'delivered'"); err != nil {
		t.Fatal(err)
	}
	// Another worker's claim ending exactly now is still its own.
	now := time.UnixMilli(time.Now().UnixMilli())
	if _, err := e.db.Exec("UPDATE room_outbox SET status = 'delivering', worker_id = 'w2', lock_until_ms = ? WHERE event_id = 'busy'",
		now.UnixMilli()); err != nil {
		t.Fatal(err)
	}
	repo := imoutbox.NewRepo(e.db)
	imoutbox.SetNow(repo, func() time.Time { return now })
	res, err := repo.ClaimEvents(context.Background(), "w1", []string{"delivered", "busy", "missing"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Claimed) != 0 || !slices.Equal(res.Done, []string{"delivered"}) || !slices.Equal(res.Busy, []string{"busy"}) || !slices.Equal(res.Missing, []string{"missing"}) {
		t.Fatalf("claims = %+v, want only Done [delivered], Busy [busy], Missing [missing]", res)
	}
}

// TestClaimPendingTakesTheOldestEligibleAcrossBranches: past the limit,
// the rows eligible longest ago win, whatever their branch (a pending
// row's eligibility starts at its creation, a retryable or expired one's
// at its lock_until_ms), ties going to the lower id; the claimed rows come
// back in id order, so one room's events go out in order.
func TestClaimPendingTakesTheOldestEligibleAcrossBranches(t *testing.T) {
	e := newEnv(t, false)
	now := time.UnixMilli(time.Now().UnixMilli())
	nowMs := now.UnixMilli()
	// ids 1..5, all created a minute ago (a pending row's lock_until_ms
	// stays 0).
	e.insert(time.Minute, gift("retry-10s", "room-1", 1), gift("pending", "room-2", 1), gift("expired-30s", "room-3", 1),
		gift("tie-a", "room-4", 1), gift("tie-b", "room-5", 1))
	for id, lockUntil := range map[string]int64{"retry-10s": nowMs - 10_000, "expired-30s": nowMs - 30_000, "tie-a": nowMs - 5_000, "tie-b": nowMs - 5_000} {
		status := "retryable"
		if id == "expired-30s" || id == "tie-b" {
			status = "delivering" // an expired claim: the tie crosses branches
		}
		if _, err := e.db.Exec("UPDATE room_outbox SET status = ?, worker_id = 'dead', lock_until_ms = ? WHERE event_id = ?", status, lockUntil, id); err != nil {
			t.Fatal(err)
		}
	}
	repo := imoutbox.NewRepo(e.db)
	imoutbox.SetNow(repo, func() time.Time { return now })
	claim := func(limit int) []string {
		t.Helper()
		rows, err := repo.ClaimPending(context.Background(), "w1", limit, time.Second, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range rows {
			got = append(got, r.EventID)
		}
		return got
	}
	// Eligible since: pending -60 s, expired -30 s, retry -10 s, ties -5 s.
	if got := claim(2); !slices.Equal(got, []string{"pending", "expired-30s"}) {
		t.Fatalf("limit 2 claimed %v, want [pending expired-30s] in id order", got)
	}
	if got := claim(2); !slices.Equal(got, []string{"retry-10s", "tie-a"}) {
		t.Fatalf("next limit 2 claimed %v, want [retry-10s tie-a] (the tie to the lower id), in id order", got)
	}
}

// TestClaimPendingWhenEveryCandidateIsTaken: another worker claims the
// only candidate between the candidate read and the locking read; the scan
// claims nothing and is no error.
func TestClaimPendingWhenEveryCandidateIsTaken(t *testing.T) {
	e := newEnv(t, false)
	e.insert(time.Minute, gift("only", "room-1", 1))
	db := testenv.OpenHooked(t, e.m.DSN, testenv.SQLHooks{Statement: func(_ context.Context, q string) error {
		if strings.Contains(q, "FOR UPDATE SKIP LOCKED") {
			if _, err := e.db.Exec("UPDATE room_outbox SET status = 'delivering', worker_id = 'w2', lock_until_ms = ? WHERE event_id = 'only'",
				time.Now().Add(time.Minute).UnixMilli()); err != nil {
				return err
			}
		}
		return nil
	}})
	if got := claimedIDs(t, imoutbox.NewRepo(db), 10, time.Second, nil, 1); len(got) != 0 {
		t.Fatalf("claimed %v, want nothing", got)
	}
}

// TestReleaseRestoresThePreviousStatus: claimed rows never sent go back to
// pending if they were pending, and to retryable otherwise (a retryable
// row, or a delivering one taken over from an expired claim), unlocked.
func TestReleaseRestoresThePreviousStatus(t *testing.T) {
	e := newEnv(t, false)
	e.insert(time.Minute, gift("was-pending", "room-1", 1), gift("was-retryable", "room-2", 1), gift("was-delivering", "room-3", 1))
	past := time.Now().Add(-time.Second).UnixMilli()
	if _, err := e.db.Exec("UPDATE room_outbox SET status = 'retryable', lock_until_ms = ? WHERE event_id = 'was-retryable'", past); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.Exec("UPDATE room_outbox SET status = 'delivering', worker_id = 'dead', lock_until_ms = ? WHERE event_id = 'was-delivering'", past); err != nil {
		t.Fatal(err)
	}
	repo := imoutbox.NewRepo(e.db)
	rows, err := repo.ClaimPending(context.Background(), "w1", 10, time.Second, time.Minute)
	if err != nil || len(rows) != 3 {
		t.Fatalf("claimed %d rows, %v; want 3", len(rows), err)
	}
	if err := repo.Release(context.Background(), "w1", rows); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{"was-pending": "pending", "was-retryable": "retryable", "was-delivering": "retryable"} {
		if r := e.row(id); r.Status != want || r.WorkerID != "" || r.LockUntil != 0 {
			t.Errorf("%s released as %+v, want %s, unlocked", id, r, want)
		}
	}
}
