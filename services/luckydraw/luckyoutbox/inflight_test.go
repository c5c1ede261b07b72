package luckyoutbox_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyapp/roomflow/internal/testenv"
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

// heldTurns is a worker whose wallet calls wait for release, over n
// pending rewards, with every credit turn taken: four batches of one
// reward each (rewards 0-3) are in the wallet when holdTurns returns.
type heldTurns struct {
	w       *luckyoutbox.Worker
	held    *heldWallet
	rewards []string
	outs    []luckyoutbox.CreditOutcome // by reward, once release returned
	wg      sync.WaitGroup
}

func holdTurns(t *testing.T, e *env, cfg luckyoutbox.Config, n int) *heldTurns {
	t.Helper()
	h := &heldTurns{held: &heldWallet{next: e.wallet, entered: make(chan string, n), release: make(chan struct{})},
		outs: make([]luckyoutbox.CreditOutcome, n)}
	var err error
	if h.w, err = luckyoutbox.New(cfg, e.db, h.held); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.w.Close(context.Background()) })
	future := time.Now().Add(time.Hour).UnixMilli()
	for i := range n {
		r, _ := e.seedReward(i, 10, future)
		h.rewards = append(h.rewards, r)
	}
	for i := range 4 {
		h.credit(i)
	}
	for range 4 {
		select {
		case <-h.held.entered:
		case <-time.After(10 * time.Second):
			t.Fatal("four groups did not all reach the wallet")
		}
	}
	return h
}

// credit starts the batch of reward i alone.
func (h *heldTurns) credit(i int) {
	h.wg.Go(func() { h.outs[i] = h.w.CreditRewards(context.Background(), app, h.rewards[i:i+1])[0] })
}

// release lets the wallet answer and waits for every batch.
func (h *heldTurns) release() {
	close(h.held.release)
	h.wg.Wait()
}

// While every turn is taken (a slow wallet), the batches that ask join one
// waiting group, which the next turn runs, up to Concurrency rewards: three
// single-reward batches behind four groups in flight make one group of
// three (two groups when Concurrency is 2), and every reward is credited
// once.
func TestSyncCreditMergesWaitingBatches(t *testing.T) {
	for _, c := range []struct{ concurrency, groups int }{{16, 5}, {2, 6}} {
		t.Run(fmt.Sprintf("concurrency=%d", c.concurrency), func(t *testing.T) {
			e := newEnv(t)
			reg := prometheus.NewRegistry()
			cfg := e.config(reg)
			cfg.Concurrency, cfg.BatchSize = c.concurrency, 10
			h := holdTurns(t, e, cfg, 7)
			for i := 4; i < 7; i++ {
				h.credit(i)
			}
			time.Sleep(100 * time.Millisecond) // the three batches wait for a turn
			h.release()
			for i, o := range h.outs {
				if o.Err != nil || o.Status != "granted" {
					t.Fatalf("reward %d: %+v, want granted", i, o)
				}
			}
			if st := e.fake.Stats(); st.Calls != 7 || st.Credits != 7 {
				t.Fatalf("wallet %+v: want one call per reward", st)
			}
			if n, _ := testenv.Metric(reg, "roomflow_lucky_credit_group_rewards"); int(n) != c.groups {
				t.Fatalf("%v credit groups, want %d: four in flight and the waiting ones", n, c.groups)
			}
		})
	}
}
