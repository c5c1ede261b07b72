package imoutbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/sinks/imoutbox"
	"github.com/hyapp/roomflow/sinks/tencentim"
)

// Claims: batched fast-path claims report done/busy/missing; renewals
// extend only the holder's live claims; the backlog gauges count rows.
func TestClaimsRenewAndGauges(t *testing.T) {
	e := newEnv(t, false)
	e.insert(10*time.Second, gift("a", "r1", 1), gift("b", "r1", 2), gift("c", "r2", 1), gift("d", "r3", 1))
	if _, err := e.db.Exec(`UPDATE room_outbox SET status='delivered' WHERE event_id='d'`); err != nil {
		t.Fatal(err)
	}
	repo := imoutbox.NewRepo(e.db)
	ctx := context.Background()
	cl, err := repo.ClaimEvents(ctx, "w1", []string{"a", "b", "d", "zz"}, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(cl.Claimed) != 2 || len(cl.Done) != 1 || cl.Done[0] != "d" || len(cl.Missing) != 1 || cl.Missing[0] != "zz" {
		t.Fatalf("claims %+v", cl)
	}
	// A live claim is busy for everyone else, on both paths.
	cl2, err := repo.ClaimEvents(ctx, "w2", []string{"a", "c"}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(cl2.Claimed) != 1 || cl2.Claimed["c"].EventID != "c" || len(cl2.Busy) != 1 || cl2.Busy[0] != "a" {
		t.Fatalf("second claim %+v", cl2)
	}
	if rows, _ := repo.ClaimPending(ctx, "w3", 10, 0, time.Second); len(rows) != 0 {
		t.Fatalf("scan took live claims: %+v", rows)
	}
	// w1 renews: its claims outlive their first deadline.
	ids := []int64{cl.Claimed["a"].ID, cl.Claimed["b"].ID, cl2.Claimed["c"].ID}
	if n, err := repo.RenewLocks(ctx, "w1", ids, 5*time.Second); err != nil || n != 2 { // c is w2's
		t.Fatalf("renewed %d: %v", n, err)
	}
	time.Sleep(300 * time.Millisecond)
	if rows, _ := repo.ClaimPending(ctx, "w3", 10, 0, time.Second); len(rows) != 0 {
		t.Fatalf("renewed claims taken over: %+v", rows)
	}
	if r := e.row("a"); r.WorkerID != "w1" || r.LockUntil < time.Now().Add(4*time.Second).UnixMilli() {
		t.Fatalf("renewal: %+v", r)
	}

	c, _ := tencentim.New(e.cfg.IM)
	reg := prometheus.NewRegistry()
	cfg := e.cfg.ServiceConfig
	cfg.Registerer, cfg.Logger = reg, e.logger()
	s, err := imoutbox.NewService(cfg, repo, c)
	if err != nil {
		t.Fatal(err)
	}
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go s.RunGauges(gctx, 50*time.Millisecond)
	testenv.Eventually(t, 5*time.Second, "pending{delivering} = 3", func() bool {
		return metric(t, reg, "roomflow_im_outbox_pending", map[string]string{"status": "delivering"}) == 3
	})
	if v := metric(t, reg, "roomflow_im_outbox_oldest_pending_age_seconds", nil); v < 9 || v > 60 {
		t.Fatalf("oldest age %v", v)
	}
}

// A row that another transaction merely locks (our own recorder's mark in
// a scan, room-service's update) is not another worker's: the claim waits
// for the lock and takes the row. SKIP LOCKED reported it Busy, and the
// fast path left it to the compensation scan, after its room's later
// events (TestFastPathDeliversInRoomOrder failed now and then on it).
func TestClaimWaitsForATransientLock(t *testing.T) {
	e := newEnv(t, false)
	e.insert(0, gift("a", "r1", 1), gift("b", "r1", 2))
	ctx := context.Background()
	holder := e.lockRow("a")
	const held = 300 * time.Millisecond
	time.AfterFunc(held, func() { _ = holder.Commit() })
	start := time.Now()
	cl, err := imoutbox.NewRepo(e.db).ClaimEvents(ctx, "w1", []string{"a", "b"}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(cl.Claimed) != 2 || len(cl.Busy) != 0 {
		t.Fatalf("a transient lock made a row busy: %+v", cl)
	}
	if el := time.Since(start); el < held-50*time.Millisecond {
		t.Fatalf("the claim returned after %s, before the lock was released", el)
	}
}

// Marks run at READ COMMITTED: on a small table MariaDB runs a long id list
// as a scan, which at REPEATABLE READ locks (and waits for) every row it
// reads, so a mark waited for a claim of rows it does not change, and held
// up claims of rows it only read.
func TestMarksDoNotWaitForRowsTheyDoNotChange(t *testing.T) {
	e := newEnv(t, false)
	var evs []event
	for i := range 40 {
		evs = append(evs, gift(fmt.Sprintf("m-%02d", i), "r1", int64(i+1)))
	}
	e.insert(0, evs...)
	repo := imoutbox.NewRepo(e.db)
	ctx := context.Background()
	var ids []string
	for _, ev := range evs[:30] {
		ids = append(ids, ev.ID)
	}
	cl, err := repo.ClaimEvents(ctx, "w1", ids, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var claimed []int64
	for _, r := range cl.Claimed {
		claimed = append(claimed, r.ID)
	}
	e.lockRow("m-35")
	mctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if _, err := repo.RenewLocks(mctx, "w1", claimed, time.Minute); err != nil {
		t.Fatalf("renew waited for a row it does not change: %v", err)
	}
	if err := repo.MarkDelivered(mctx, claimed); err != nil {
		t.Fatalf("mark waited for a row it does not change: %v", err)
	}
	if r := e.row("m-00"); r.Status != "delivered" {
		t.Fatalf("m-00: %+v", r)
	}
}

// lockRow locks eventID's row in a transaction of the server's default
// isolation, as another writer would, until the returned transaction ends
// (at the latest when the test ends).
func (e *env) lockRow(eventID string) *sql.Tx {
	e.t.Helper()
	tx, err := e.db.BeginTx(context.Background(), nil)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = tx.Rollback() })
	if _, err := tx.Exec(`SELECT id FROM room_outbox WHERE event_id = ? FOR UPDATE`, eventID); err != nil {
		e.t.Fatal(err)
	}
	return tx
}
