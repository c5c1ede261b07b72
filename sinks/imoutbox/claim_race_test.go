package imoutbox_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/sinks/imoutbox"
)

// TestClaimPendingRechecksUnderLock: between ClaimPending's candidate read
// and its locking read (injected at the connection level, right before the
// FOR UPDATE SKIP LOCKED statement is sent), other workers claim one
// candidate, mark one delivered, fail one (retryable, retry later), and
// take over an expired claim with a lock that ends exactly at the scan's
// now. None of them may be returned or changed by the scan. The candidates
// that stay eligible exactly at their bounds (a pending row created exactly
// claim_grace ago, a retryable and a pending row whose lock_until_ms is
// exactly now, a claim that expired 1 ms ago) are claimed.
func TestClaimPendingRechecksUnderLock(t *testing.T) {
	e := newEnv(t, false)
	const grace = 5 * time.Second
	now := time.UnixMilli(time.Now().UnixMilli())
	nowMs := now.UnixMilli()
	var evs []event
	for i, id := range []string{"claimed", "delivered", "failed", "taken-over", "pending-at-grace", "retry-at-now", "pending-at-now", "expired-1ms"} {
		evs = append(evs, gift(id, fmt.Sprintf("room-%d", i), 1))
	}
	e.insert(time.Minute, evs...)
	set := func(id, sql string, args ...any) {
		t.Helper()
		if _, err := e.db.Exec("UPDATE room_outbox SET "+sql+" WHERE event_id = ?", append(args, id)...); err != nil {
			t.Fatal(err)
		}
	}
	set("delivered", "status = 'retryable', lock_until_ms = ?", nowMs-1000)
	set("failed", "status = 'retryable', lock_until_ms = ?", nowMs-1000)
	set("taken-over", "status = 'delivering', worker_id = 'dead', lock_until_ms = ?", nowMs-1000)
	set("pending-at-grace", "created_at_ms = ?", nowMs-grace.Milliseconds())
	set("retry-at-now", "status = 'retryable', lock_until_ms = ?", nowMs)
	set("pending-at-now", "lock_until_ms = ?", nowMs)
	set("expired-1ms", "status = 'delivering', worker_id = 'dead', lock_until_ms = ?", nowMs-1)

	var once sync.Once
	interfered := false
	db := testenv.OpenHooked(t, e.m.DSN, testenv.SQLHooks{Statement: func(_ context.Context, q string) error {
		if !strings.Contains(q, "FOR UPDATE SKIP LOCKED") {
			return nil
		}
		once.Do(func() {
			interfered = true
			// Other workers, each in its own committed statement.
			set("claimed", "status = 'delivering', worker_id = 'w2', lock_until_ms = ?", nowMs+60_000)
			set("delivered", "status = 'delivered', lock_until_ms = 0")
			set("failed", "status = 'retryable', retry_count = retry_count + 1, lock_until_ms = ?", nowMs+1)
			set("taken-over", "worker_id = 'w3', lock_until_ms = ?", nowMs)
		})
		return nil
	}})
	repo := imoutbox.NewRepo(db)
	imoutbox.SetNow(repo, func() time.Time { return now })
	rows, err := repo.ClaimPending(context.Background(), "w1", 100, grace, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !interfered {
		t.Fatal("the locking read was never intercepted: the test exercised nothing")
	}
	var got []string
	for _, r := range rows {
		got = append(got, r.EventID)
	}
	slices.Sort(got)
	want := []string{"expired-1ms", "pending-at-grace", "pending-at-now", "retry-at-now"}
	if !slices.Equal(got, want) {
		t.Fatalf("claimed %v, want %v", got, want)
	}
	for id, want := range map[string]rowState{
		"claimed":    {Status: "delivering", WorkerID: "w2", LockUntil: nowMs + 60_000},
		"delivered":  {Status: "delivered"},
		"failed":     {Status: "retryable", RetryCount: 1, LockUntil: nowMs + 1},
		"taken-over": {Status: "delivering", WorkerID: "w3", LockUntil: nowMs},
	} {
		if r := e.row(id); r.Status != want.Status || r.WorkerID != want.WorkerID || r.LockUntil != want.LockUntil || r.RetryCount != want.RetryCount {
			t.Errorf("%s = %+v after the scan, want the other worker's %+v", id, r, want)
		}
	}
	for _, id := range want {
		if r := e.row(id); r.Status != "delivering" || r.WorkerID != "w1" || r.LockUntil != nowMs+60_000 {
			t.Errorf("%s = %+v, want claimed by w1 until now+lock_ttl", id, r)
		}
	}
}
