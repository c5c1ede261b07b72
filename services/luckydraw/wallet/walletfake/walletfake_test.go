package walletfake_test

import (
	"context"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/hyapp/roomflow/schemas/walletv1"
	"github.com/hyapp/roomflow/services/luckydraw/wallet/walletfake"
)

// dial returns a raw generated client of w (no wallet.Client checks in
// between, so the fake's own refusals are reachable).
func dial(t *testing.T, w *walletfake.Wallet) walletv1.WalletServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(w.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return walletv1.NewWalletServiceClient(conn)
}

func listen(t *testing.T, cfg walletfake.Config) *walletfake.Wallet {
	t.Helper()
	w, err := walletfake.Listen(cfg, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func req(reward string, user, coins int64) *walletv1.CreditLuckyRewardRequest {
	return &walletv1.CreditLuckyRewardRequest{RewardId: reward, DrawId: "d-" + reward, CommandId: "c-" + reward, RoomId: "r1", UserId: user, RewardCoins: coins, Reason: "lucky_gift_reward"}
}

func TestRepeatedCreditPaysOnceWithTheSameReceipt(t *testing.T) {
	w := listen(t, walletfake.Config{Seed: 1})
	c := dial(t, w)
	ctx := context.Background()
	var receipts []string
	for range 3 {
		resp, err := c.CreditLuckyReward(ctx, req("rw1", 7, 50))
		if err != nil {
			t.Fatal(err)
		}
		receipts = append(receipts, resp.GetCreditReceiptId())
		if resp.GetBalanceAfter() != 50 {
			t.Fatalf("balance_after = %d, want 50", resp.GetBalanceAfter())
		}
	}
	if receipts[0] == "" || receipts[0] != receipts[1] || receipts[1] != receipts[2] {
		t.Fatalf("receipts differ: %v", receipts)
	}
	if receipts[0] != walletfake.ReceiptID("rw1") {
		t.Fatalf("receipt %s, want ReceiptID(rw1) %s", receipts[0], walletfake.ReceiptID("rw1"))
	}
	if _, err := c.CreditLuckyReward(ctx, req("rw2", 7, 5)); err != nil {
		t.Fatal(err)
	}
	if b := w.Balances()[7]; b != 55 {
		t.Fatalf("balance = %d, want 55", b)
	}
	st := w.Stats()
	if st.Calls != 4 || st.Credits != 2 || st.Repeats != 2 {
		t.Fatalf("stats = %+v, want 4 calls, 2 credits, 2 repeats", st)
	}
	l := w.Ledger()
	if len(l) != 2 || l["rw1"].Calls != 3 || l["rw1"].Coins != 50 || l["rw1"].DrawID != "d-rw1" || l["rw2"].Calls != 1 {
		t.Fatalf("ledger = %+v", l)
	}
}

func TestRefusals(t *testing.T) {
	w := listen(t, walletfake.Config{Seed: 1})
	c := dial(t, w)
	ctx := context.Background()
	for _, r := range []*walletv1.CreditLuckyRewardRequest{req("", 1, 1), req("x", 0, 1), req("x", 1, 0), req("x", 1, -5)} {
		if _, err := c.CreditLuckyReward(ctx, r); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("%v: err %v, want InvalidArgument", r, err)
		}
	}
	if _, err := c.CreditLuckyReward(ctx, req("rw", 1, 10)); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*walletv1.CreditLuckyRewardRequest{req("rw", 2, 10), req("rw", 1, 11)} {
		if _, err := c.CreditLuckyReward(ctx, r); status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("%v: err %v, want FailedPrecondition", r, err)
		}
	}
	st := w.Stats()
	if st.Invalid != 4 || st.Conflicts != 2 || st.Credits != 1 || w.Balances()[1] != 10 || w.Balances()[2] != 0 {
		t.Fatalf("stats %+v balances %v", st, w.Balances())
	}
}

func TestFaults(t *testing.T) {
	w := listen(t, walletfake.Config{Seed: 1})
	c := dial(t, w)
	ctx := context.Background()

	if err := w.SetFaults(walletfake.Faults{ErrorRate: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreditLuckyReward(ctx, req("e", 1, 1)); status.Code(err) != codes.Unavailable {
		t.Fatalf("error fault: %v, want Unavailable", err)
	}
	if len(w.Ledger()) != 0 {
		t.Fatal("an injected error credited")
	}

	if err := w.SetFaults(walletfake.Faults{TimeoutRate: 1}); err != nil {
		t.Fatal(err)
	}
	tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	t0 := time.Now()
	_, err := c.CreditLuckyReward(tctx, req("t", 1, 1))
	cancel()
	if status.Code(err) != codes.DeadlineExceeded || time.Since(t0) < 50*time.Millisecond {
		t.Fatalf("timeout fault: %v after %s, want DeadlineExceeded after 50ms", err, time.Since(t0))
	}
	if len(w.Ledger()) != 0 {
		t.Fatal("a hang credited")
	}

	if err := w.SetFaults(walletfake.Faults{LostRate: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreditLuckyReward(ctx, req("l", 1, 9)); status.Code(err) != codes.Unavailable {
		t.Fatalf("lost fault: %v, want Unavailable", err)
	}
	if l := w.Ledger(); l["l"].Coins != 9 {
		t.Fatalf("a lost response did not credit: %v", l)
	}
	if err := w.SetFaults(walletfake.Faults{Latency: 40 * time.Millisecond, Jitter: 20 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	resp, err := c.CreditLuckyReward(ctx, req("l", 1, 9))
	if err != nil || resp.GetCreditReceiptId() != walletfake.ReceiptID("l") {
		t.Fatalf("retry after a lost answer: %v %v", resp, err)
	}
	if d := time.Since(t0); d < 40*time.Millisecond {
		t.Fatalf("latency fault: answered in %s, want >= 40ms", d)
	}
	// Latency past the caller's deadline: no credit.
	tctx, cancel = context.WithTimeout(ctx, 10*time.Millisecond)
	_, err = c.CreditLuckyReward(tctx, req("slow", 1, 1))
	cancel()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("slow answer: %v, want DeadlineExceeded", err)
	}
	time.Sleep(60 * time.Millisecond) // the server's handler has ended
	st := w.Stats()
	if _, ok := w.Ledger()["slow"]; ok || st.Credits != 1 || st.Errors != 1 || st.Timeouts != 1 || st.Lost != 1 || st.Repeats != 1 || w.Balances()[1] != 9 {
		t.Fatalf("stats %+v ledger %v", st, w.Ledger())
	}
}

func TestSeededFaultsRepeat(t *testing.T) {
	run := func(seed uint64) []bool {
		w, err := walletfake.New(walletfake.Config{Seed: seed, Faults: walletfake.Faults{ErrorRate: 0.5}})
		if err != nil {
			t.Fatal(err)
		}
		var ok []bool
		for i := range 64 {
			_, err := w.CreditLuckyReward(context.Background(), req(string(rune('a'+i%26))+string(rune('a'+i/26)), 1, 1))
			ok = append(ok, err == nil)
		}
		return ok
	}
	a, b, c := run(5), run(5), run(6)
	if !slices.Equal(a, b) {
		t.Fatal("same seed, different fault draws")
	}
	if slices.Equal(a, c) {
		t.Fatal("different seeds, same fault draws")
	}
	if n := len(slices.DeleteFunc(slices.Clone(a), func(v bool) bool { return !v })); n < 16 || n > 48 {
		t.Fatalf("%d of 64 succeeded at error rate 0.5", n)
	}
}

func TestInvalidFaults(t *testing.T) {
	for _, f := range []walletfake.Faults{{ErrorRate: -0.1}, {LostRate: 1.5}, {ErrorRate: 0.6, TimeoutRate: 0.6}, {Latency: -1}} {
		if _, err := walletfake.New(walletfake.Config{Faults: f}); err == nil {
			t.Fatalf("New accepted %+v", f)
		}
	}
	w, _ := walletfake.New(walletfake.Config{})
	if err := w.SetFaults(walletfake.Faults{TimeoutRate: 2}); err == nil || w.Faults().TimeoutRate != 0 {
		t.Fatalf("SetFaults accepted an invalid rate: %v", err)
	}
}

// TestServeStopsWithContext: the child-process entry serves until its
// context ends, ending hanging calls, and returns nil.
func TestServeStopsWithContext(t *testing.T) {
	w, err := walletfake.New(walletfake.Config{Faults: walletfake.Faults{TimeoutRate: 1}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- w.Serve(ctx, ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var wg sync.WaitGroup
	var callErr error
	wg.Go(func() {
		_, callErr = walletv1.NewWalletServiceClient(conn).CreditLuckyReward(context.Background(), req("h", 1, 1))
	})
	for w.Stats().Timeouts == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve = %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
	wg.Wait()
	if callErr == nil {
		t.Fatal("the hanging call succeeded")
	}
}
