package luckyoutbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/hyapp/roomflow/schemas/walletv1"
	"github.com/hyapp/roomflow/services/luckydraw/luckyoutbox"
)

// heldWallet passes each credit to the wallet client only once the test
// releases it, telling the test the reward id when a call is in flight.
type heldWallet struct {
	next    luckyoutbox.Wallet
	entered chan string
	release chan struct{}
}

func (h *heldWallet) Credit(ctx context.Context, req *walletv1.CreditLuckyRewardRequest) (*walletv1.CreditLuckyRewardResponse, error) {
	h.entered <- req.RewardId
	select {
	case <-h.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return h.next.Credit(ctx, req)
}

// Issue 33 item 7: while one worker holds a claimed reward_credit row
// (status processing under its lease, its wallet credit in flight),
// another worker's polls do not take it, and the wallet is called once.
func TestClaimedRowInFlightIsNotTakenByAnotherWorker(t *testing.T) {
	e := newEnv(t)
	rewardID, drawID := e.seedReward(1, 10, 0)
	eventID := luckyoutbox.RewardCreditEventID(rewardID)
	held := &heldWallet{next: e.wallet, entered: make(chan string, 1), release: make(chan struct{})}
	a, err := luckyoutbox.New(e.config(nil), e.db, held)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(context.Background()) })
	cfg := e.config(nil)
	cfg.WorkerID = "w2"
	b := e.worker(cfg)

	ctx := context.Background()
	done := make(chan error, 1)
	go func() { _, err := a.ProcessBatch(ctx); done <- err }()
	select {
	case id := <-held.entered:
		if id != rewardID {
			t.Fatalf("credit of %s in flight, want %s", id, rewardID)
		}
	case err := <-done:
		t.Fatalf("w1's batch ended (%v) without crediting", err)
	case <-time.After(10 * time.Second):
		t.Fatal("w1 never called the wallet")
	}
	if r := e.outbox(eventID); r.Status != "processing" || r.WorkerID != "w1" {
		t.Fatalf("row while w1's credit is in flight: %+v, want processing by w1", r)
	}
	for range 5 {
		n, err := b.ProcessBatch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Fatalf("w2's poll took %d rows while w1's credit was in flight", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st := e.fake.Stats(); st.Calls != 0 {
		t.Fatalf("wallet called %d times while w1's credit was held", st.Calls)
	}
	close(held.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st, receipt := e.draw(drawID); st != "granted" || receipt == "" {
		t.Fatalf("draw %s after w1's credit: %s %q, want granted", drawID, st, receipt)
	}
	// w2's poll after the grant publishes the LuckyRewardGranted event and
	// calls no wallet.
	if _, err := b.ProcessBatch(ctx); err != nil {
		t.Fatal(err)
	}
	if st := e.fake.Stats(); st.Calls != 1 || st.Credits != 1 {
		t.Fatalf("wallet %+v: want one call, one credit", st)
	}
}
