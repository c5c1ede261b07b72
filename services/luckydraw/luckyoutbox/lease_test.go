package luckyoutbox_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hyapp/roomflow/services/luckydraw/luckyoutbox"
	"github.com/hyapp/roomflow/services/luckydraw/wallet/walletfake"
)

// The synchronous credit and the poll share a worker id, so a claim is
// told apart by its lease. These tests pin the interleavings where the two
// could both call the wallet for one reward.

// drawClaim makes rewardID's row what the draw writes for its synchronous
// credit: processing under worker w1 until leaseMs, lock_until_ms equal to
// next_retry_at_ms.
func (e *env) drawClaim(rewardID string, leaseMs int64) {
	e.t.Helper()
	if _, err := e.db.Exec(`UPDATE lucky_outbox SET status = 'processing', worker_id = 'w1', lock_until_ms = ?, next_retry_at_ms = ?
		WHERE event_id = ?`, leaseMs, leaseMs, luckyoutbox.RewardCreditEventID(rewardID)); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) lease(rewardID string) int64 {
	e.t.Helper()
	var until int64
	if err := e.db.QueryRow(`SELECT lock_until_ms FROM lucky_outbox WHERE event_id = ?`, luckyoutbox.RewardCreditEventID(rewardID)).Scan(&until); err != nil {
		e.t.Fatal(err)
	}
	return until
}

// A group whose draw claim has less lease left than its wallet calls and
// their recording (a group that waited long for its turn) does not call
// the wallet: the poll takes the row once the claim lapses and credits it
// once. A claim with lease enough is credited at once.
func TestSyncCreditLeavesALapsingClaim(t *testing.T) {
	e := newEnv(t)
	w := e.worker(e.config(nil)) // wallet_credit_timeout 500ms: a group of 2 needs 1s of lease
	now := time.Now().UnixMilli()
	short, shortDraw := e.seedReward(1, 10, 0)
	long, longDraw := e.seedReward(2, 20, 0)
	e.drawClaim(short, now+300)
	e.drawClaim(long, now+10_000)

	out := w.CreditRewards(context.Background(), app, []string{short, long})
	if out[0].Err != nil || out[0].Status != "pending" {
		t.Fatalf("reward with 300ms of lease left: %+v, want pending (left to the poll)", out[0])
	}
	if out[1].Err != nil || out[1].Status != "granted" {
		t.Fatalf("reward with 10s of lease left: %+v, want granted", out[1])
	}
	if st := e.fake.Stats(); st.Calls != 1 {
		t.Fatalf("wallet %+v: want one call, none for the lapsing claim", st)
	}
	if r := e.outbox(luckyoutbox.RewardCreditEventID(short)); r.Status != "processing" || r.WorkerID != "w1" || r.RetryCount != 0 {
		t.Fatalf("lapsing claim's row after the group: %+v, want it untouched", r)
	}
	if st, _ := e.draw(longDraw); st != "granted" {
		t.Fatalf("draw %s %s", longDraw, st)
	}
	time.Sleep(time.Until(time.UnixMilli(now + 300)))
	runBatches(t, w, "the lapsed claim credited by the poll", func() bool { st, _ := e.draw(shortDraw); return st == "granted" })
	if st := e.fake.Stats(); st.Calls != 2 || st.Credits != 2 {
		t.Fatalf("wallet %+v: want one call per reward", st)
	}
}

// A group's wallet call fails after its claim lapsed and the poll of the
// same process (same worker id) took the row over: the failure is not
// recorded over the poll's claim (no attempt counted, no
// LuckyRewardPending, the row still the poll's).
func TestFailedCreditLeavesATakenOverClaim(t *testing.T) {
	e := newEnv(t)
	rewardID, drawID := e.seedReward(1, 10, 0)
	e.drawClaim(rewardID, time.Now().Add(10*time.Second).UnixMilli())
	held := &heldWallet{next: e.wallet, entered: make(chan string, 1), release: make(chan struct{})}
	w, err := luckyoutbox.New(e.config(nil), e.db, held)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close(context.Background()) })

	done := make(chan luckyoutbox.CreditOutcome, 1)
	go func() { done <- w.CreditRewards(context.Background(), app, []string{rewardID})[0] }()
	select {
	case <-held.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the group never called the wallet")
	}
	takeover := time.Now().Add(30 * time.Second).UnixMilli()
	if _, err := e.db.Exec(`UPDATE lucky_outbox SET lock_until_ms = ? WHERE event_id = ?`, takeover, luckyoutbox.RewardCreditEventID(rewardID)); err != nil {
		t.Fatal(err)
	}
	if err := e.fake.SetFaults(walletfake.Faults{ErrorRate: 1}); err != nil {
		t.Fatal(err)
	}
	close(held.release)
	o := <-done
	if o.Err != nil || o.Status != "pending" {
		t.Fatalf("outcome %+v, want the draw's stored pending", o)
	}
	if r := e.outbox(luckyoutbox.RewardCreditEventID(rewardID)); r.Status != "processing" || r.WorkerID != "w1" || r.RetryCount != 0 {
		t.Fatalf("row after the group's failure: %+v, want the poll's claim untouched", r)
	}
	if got := e.lease(rewardID); got != takeover {
		t.Fatalf("lease %d, want the poll's %d", got, takeover)
	}
	if ev := e.events(drawID); len(ev) != 0 {
		t.Fatalf("events %v recorded for a failure over another claim", ev)
	}
}

// The dispatch switch is read when a group's turn comes, not before its
// wait: a group queued behind the groups in flight while the switch went
// off calls nothing and leaves its reward pending.
func TestSyncCreditReadsTheSwitchOnItsTurn(t *testing.T) {
	e := newEnv(t)
	var on atomic.Bool
	on.Store(true)
	cfg := e.config(nil)
	cfg.DispatchEnabled = func(context.Context, string) (bool, error) { return on.Load(), nil }
	h := holdTurns(t, e, cfg, 5)
	h.credit(4)
	time.Sleep(100 * time.Millisecond) // the fifth group is waiting for a turn
	on.Store(false)
	h.release()
	for i, o := range h.outs[:4] {
		if o.Err != nil || o.Status != "granted" {
			t.Fatalf("group %d in flight before the switch: %+v, want granted", i, o)
		}
	}
	if o := h.outs[4]; o.Err != nil || o.Status != "pending" {
		t.Fatalf("group queued while the switch went off: %+v, want pending", o)
	}
	if st := e.fake.Stats(); st.Calls != 4 {
		t.Fatalf("wallet %+v: want the four calls in flight only", st)
	}
}
