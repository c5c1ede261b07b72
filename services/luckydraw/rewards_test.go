package luckydraw_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hyapp/roomflow/internal/backoff"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/services/luckydraw"
	"github.com/hyapp/roomflow/services/luckydraw/luckyoutbox"
	"github.com/hyapp/roomflow/services/luckydraw/wallet"
	"github.com/hyapp/roomflow/services/luckydraw/wallet/walletfake"
)

// crashingDispatcher is a process that dies right after the draw's
// commit: the synchronous credit never happens (and the answer is lost).
type crashingDispatcher struct{ calls atomic.Int64 }

// ClaimedBy is the dying process: the draw claims its rewards for it, and
// the other replica's worker takes them over once the claims lapse.
func (d *crashingDispatcher) ClaimedBy() string { return "crashed-process" }

func (d *crashingDispatcher) CreditRewards(_ context.Context, _ string, rewardIDs []string) []luckyoutbox.CreditOutcome {
	d.calls.Add(int64(len(rewardIDs)))
	out := make([]luckyoutbox.CreditOutcome, len(rewardIDs))
	for i := range out {
		out[i].Err = errors.New("killed between commit and dispatch")
	}
	return out
}

// TestCrashBetweenCommitAndDispatch: draws commit, the process dies before
// its synchronous credit (every hit answered PENDING); another replica's
// lucky_outbox worker, with a wallet that loses answers now and then,
// credits every reward once the row is due: every paid draw ends GRANTED
// with the wallet's receipt, the wallet paid each reward exactly once,
// and each reward has one LuckyRewardGranted event.
func TestCrashBetweenCommitAndDispatch(t *testing.T) {
	d := &crashingDispatcher{}
	e := start(t, luckydraw.Config{Dispatcher: d, WalletCreditTimeout: 50 * time.Millisecond}, 100_000)
	ctx := context.Background()
	hits := 0
	for i := range 30 {
		resp, err := e.client.ExecuteLuckyGiftDraw(ctx, drawReq(fmt.Sprint("crash", i), int64(i+1)))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Hit {
			hits++
			if resp.RewardStatus != "PENDING" || resp.CreditReceiptId != "" {
				t.Fatalf("a hit whose dispatch died must answer PENDING: %v", resp)
			}
		}
	}
	if hits == 0 || d.calls.Load() != int64(hits) {
		t.Fatalf("%d hits, %d dispatches", hits, d.calls.Load())
	}
	w, err := walletfake.Listen(walletfake.Config{Seed: 3, Faults: walletfake.Faults{LostRate: 0.3}}, "")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	wc := walletClient(t, w.Addr())
	k := testenv.NewKafka(t)
	worker, err := luckyoutbox.New(luckyoutbox.Config{AppCode: app, PollInterval: 20 * time.Millisecond, WalletCreditTimeout: 200 * time.Millisecond,
		Backoff: backoffFast(), Topic: k.Config.Topics.LuckyEvents, Kafka: k.Cluster()}, e.db, wc)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- worker.Run(wctx) }()
	testenv.Eventually(t, 30*time.Second, "every reward granted by the worker", func() bool {
		return e.count(t, `SELECT COUNT(*) FROM lucky_draw_records WHERE reward_status = 'granted'`) == int64(hits)
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	worker.Close(ctx)
	ledger := w.Ledger()
	if len(ledger) != hits {
		t.Fatalf("wallet credited %d rewards, want %d", len(ledger), hits)
	}
	rows, err := e.db.Query(`SELECT reward_id, reward_coins, credit_receipt_id FROM lucky_draw_records WHERE reward_coins > 0`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, receipt string
		var coins int64
		rows.Scan(&id, &coins, &receipt)
		c, ok := ledger[id]
		if !ok || c.Coins != coins || receipt != walletfake.ReceiptID(id) {
			t.Fatalf("reward %s (%d coins, receipt %q): wallet has %+v", id, coins, receipt, c)
		}
	}
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_outbox WHERE message_type = 'LuckyRewardGranted'`); n != int64(hits) {
		t.Fatalf("%d LuckyRewardGranted events for %d rewards", n, hits)
	}
	e.checkInvariants(t)
}

// TestAuditReplay10000Draws: 10,000 concurrent draws all pass the audit
// (selected tier, reward and digest recomputed from the stored candidate
// table and random value); tampering with three of them is found, and
// only those.
func TestAuditReplay10000Draws(t *testing.T) {
	if testing.Short() {
		t.Skip("audit replay of 10,000 draws takes seconds; skipped under -short (make unit), run by make test")
	}
	e := start(t, luckydraw.Config{}, 10_000_000)
	ctx := context.Background()
	var g errgroup.Group
	g.SetLimit(64)
	var mu sync.Mutex
	var ids []string
	for i := range 10_000 {
		g.Go(func() error {
			// As a client does: a draw that timed out (Unavailable, on a
			// loaded machine) is retried with the same command_id.
			req := drawReq(fmt.Sprint("audit", i), int64(1+i%500))
			resp, err := e.svc.ExecuteLuckyGiftDraw(ctx, req)
			for try := 1; status.Code(err) == codes.Unavailable && try < 5; try++ {
				resp, err = e.svc.ExecuteLuckyGiftDraw(ctx, req)
			}
			if err != nil {
				return err
			}
			mu.Lock()
			ids = append(ids, resp.DrawId)
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	res, err := luckydraw.Audit(ctx, e.db, "test-key", luckydraw.AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 10_000 {
		t.Fatalf("audited %d draws, want 10000", len(res))
	}
	for _, r := range res {
		if !r.OK {
			t.Fatalf("draw %s: %v", r.DrawID, r.Mismatches)
		}
	}
	e.checkInvariants(t)
	tampered := map[string]bool{ids[1]: true, ids[500]: true, ids[9999]: true}
	e.db.Exec(`UPDATE lucky_draw_records SET random_value = (random_value + 500000) % 1000000 WHERE draw_id = ?`, ids[1])
	e.db.Exec(`UPDATE lucky_draw_records SET selected_tier_id = IF(selected_tier_id = 'none', 'x1', 'none') WHERE draw_id = ?`, ids[500])
	e.db.Exec(`UPDATE lucky_draw_records SET random_digest = REPEAT('0', 64) WHERE draw_id = ?`, ids[9999])
	res, err = luckydraw.Audit(ctx, e.db, "test-key", luckydraw.AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.OK == tampered[r.DrawID] {
			t.Fatalf("draw %s: ok=%v, tampered=%v (%v)", r.DrawID, r.OK, tampered[r.DrawID], r.Mismatches)
		}
	}
}

// walletClient is a wallet client of the fake wallet at addr.
func walletClient(t *testing.T, addr string) *wallet.Client {
	t.Helper()
	wc, err := wallet.New(wallet.Config{Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wc.Close() })
	return wc
}

// backoffFast retries failed credits within tens of milliseconds.
func backoffFast() backoff.Config {
	return backoff.Config{First: 10 * time.Millisecond, Max: 50 * time.Millisecond}
}

// TestConfigRiskCaps: the caps the config holds (device daily, anchor
// daily, the activity period) filter a tier before the draw like the
// rule's: under a 150-coin cap only one 100-coin x1 is won across 30
// draws, a LuckyRiskRejected names the scope, and its counter holds what
// was paid. Windows without a cap are still counted exactly (written
// without being read).
func TestConfigRiskCaps(t *testing.T) {
	now := time.Now().UnixMilli()
	for _, tc := range []struct {
		scope, id string
		cfg       luckydraw.Config
	}{
		{"device", "shared-dev", luckydraw.Config{MaxDeviceDailyPayout: 150}},
		{"anchor", "900", luckydraw.Config{MaxAnchorDailyPayout: 150}},
		{"activity", "period", luckydraw.Config{ActivityPeriodPayout: 150, ActivityPeriodStartMs: now - 3_600_000, ActivityPeriodEndMs: now + 3_600_000}},
	} {
		t.Run(tc.scope, func(t *testing.T) {
			e := start(t, tc.cfg, 100_000)
			ctx := context.Background()
			won := int64(0)
			for i := range 30 {
				req := drawReq(fmt.Sprint(tc.scope, i), int64(1000+i)) // a new user each draw: only tc.scope is shared
				req.Meta.DeviceId = "shared-dev"
				resp, err := e.client.ExecuteLuckyGiftDraw(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				won += resp.Tier.RewardCoins
			}
			if won != 100 {
				t.Fatalf("won %d under a %s cap of 150 with 100- and 1000-coin tiers", won, tc.scope)
			}
			if n := e.count(t, `SELECT COUNT(*) FROM lucky_outbox WHERE event_id LIKE ?`, "LuckyRiskRejected:%:"+tc.scope); n == 0 {
				t.Fatalf("no LuckyRiskRejected for the %s cap", tc.scope)
			}
			if n := e.count(t, `SELECT payout_coins FROM lucky_risk_counters WHERE scope_type = ? AND scope_id = ?`, tc.scope, tc.id); n != 100 {
				t.Fatalf("%s counter holds %d, want 100", tc.scope, n)
			}
			// The uncapped windows (every scope but tc.scope and the
			// rule-less room and user caps) count every draw and coin.
			for _, sc := range []struct{ scope, id string }{{"device", "shared-dev"}, {"anchor", "900"}, {"room", "r1"}} {
				if sc.scope == tc.scope {
					continue
				}
				if d, p := e.count(t, `SELECT draw_count FROM lucky_risk_counters WHERE scope_type = ? AND scope_id = ?`, sc.scope, sc.id),
					e.count(t, `SELECT payout_coins FROM lucky_risk_counters WHERE scope_type = ? AND scope_id = ?`, sc.scope, sc.id); d != 30 || p != 100 {
					t.Fatalf("uncapped %s counter: %d draws, %d coins; want 30, 100", sc.scope, d, p)
				}
			}
			e.checkInvariants(t)
		})
	}
}
