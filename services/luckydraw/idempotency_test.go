package luckydraw_test

import (
	"context"
	"database/sql/driver"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/services/luckydraw"
)

// A command_id stands for one debit and one gift: a repeat that differs
// in any of them is not a retry. These tests cover the paths a repeat
// reaches the stored outcome by (the batch's idempotency read, the unique
// key read back by a retried batch, a client retry after a lost COMMIT
// answer); the same batch's repeat is TestConflictingRequestInOneBatch.

// billed is drawReq with a billing_receipt_id.
func billed(cmd, bill string) *activityv1.ExecuteLuckyGiftDrawRequest {
	r := drawReq(cmd, 1)
	r.BillingReceiptId = bill
	return r
}

// refused fails t unless err is FailedPrecondition naming exactly the
// differing request fields.
func refused(t *testing.T, err error, fields string) {
	t.Helper()
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "(differs in: "+fields+")") {
		t.Errorf("want FailedPrecondition naming %s, got %v", fields, err)
	}
}

// TestConflictingRetryIsRefused: a command_id repeated with another
// billing_receipt_id, room, sender, target, gift, gift_count, coin_spent
// or heat_value (a second debit, or another gift) answers
// FailedPrecondition and records nothing, so room-service refunds it; it
// used to answer the first draw as success. The stored outcome, a draw or
// a rejection, stays, and a true retry (request_id, device_id,
// client_seed and rule_version aside) still answers it.
func TestConflictingRetryIsRefused(t *testing.T) {
	e := start(t, luckydraw.Config{}, 100_000)
	ctx := context.Background()
	first := billed("cmd", "bill-1")
	drawn, err := e.client.ExecuteLuckyGiftDraw(ctx, first)
	if err != nil || drawn.RejectReason != "" {
		t.Fatalf("first: %v %v", drawn, err)
	}
	for field, edit := range map[string]func(*activityv1.ExecuteLuckyGiftDrawRequest){
		"billing_receipt_id":  func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.BillingReceiptId = "bill-2" },
		"meta.room_id":        func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.Meta.RoomId = "r2" },
		"meta.sender_user_id": func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.Meta.SenderUserId = 2 },
		"meta.target_user_id": func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.Meta.TargetUserId = 901 },
		"gift_id":             func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.GiftId = "tulip" },
		"gift_count":          func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.GiftCount = 2 },
		"coin_spent":          func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.CoinSpent = 9000 },
		"heat_value":          func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.HeatValue = 9000 },
	} {
		req := proto.Clone(first).(*activityv1.ExecuteLuckyGiftDrawRequest)
		edit(req)
		_, err := e.client.ExecuteLuckyGiftDraw(ctx, req)
		refused(t, err, field)
	}
	retry := proto.Clone(first).(*activityv1.ExecuteLuckyGiftDrawRequest)
	retry.Meta.RequestId, retry.Meta.DeviceId, retry.Meta.ClientSeed, retry.RuleVersion = "req-2", "dev-2", "seed-2", "v1"
	again, err := e.client.ExecuteLuckyGiftDraw(ctx, retry)
	if err != nil || again.DrawId != drawn.DrawId || again.Tier.GetTierId() != drawn.Tier.GetTierId() {
		t.Fatalf("true retry: %v %v, want the stored draw %v", again, err, drawn)
	}

	off := false
	if _, err := testAdmin(t, e.db).SetSwitch(ctx, app, luckydraw.SwitchGlobal, "", &off); err != nil {
		t.Fatal(err)
	}
	rejected, err := e.client.ExecuteLuckyGiftDraw(ctx, billed("rej", "bill-3"))
	if err != nil || rejected.RejectReason != luckydraw.RejectGlobalDisabled {
		t.Fatalf("rejection: %v %v", rejected, err)
	}
	_, err = e.client.ExecuteLuckyGiftDraw(ctx, billed("rej", "bill-4"))
	refused(t, err, "billing_receipt_id")
	if again, err := e.client.ExecuteLuckyGiftDraw(ctx, billed("rej", "bill-3")); err != nil || again.RejectReason != luckydraw.RejectGlobalDisabled {
		t.Fatalf("retry of the rejection: %v %v", again, err)
	}

	if n := e.count(t, `SELECT COUNT(*) FROM lucky_draw_records`); n != 2 {
		t.Errorf("%d records for two commands", n)
	}
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_outbox WHERE message_type = 'LuckyDrawRejected'`); n != 1 {
		t.Errorf("%d LuckyDrawRejected rows, want the one rejection's", n)
	}
	if v, _ := testenv.Metric(e.reg, "roomflow_lucky_draws_total", "outcome", "conflict"); v != 9 {
		t.Errorf("roomflow_lucky_draws_total{outcome=conflict} = %v, want 9", v)
	}
	e.checkInvariants(t)
}

// TestConflictingCommandOnAnotherReplica: a conflicting repeat on another
// replica while the first draw's batch is still uncommitted reads no
// stored draw, draws, hits the unique key once the first commits, and its
// retried batch reads the stored row back: FailedPrecondition, never the
// first's answer.
func TestConflictingCommandOnAnotherReplica(t *testing.T) {
	h := newHeldCommit(t)
	e := startHooked(t, luckydraw.Config{DrawTimeout: 20 * time.Second}, 100_000, h.hooks())
	reg := prometheus.NewRegistry()
	other := e.replica(t, luckydraw.Config{DrawTimeout: 20 * time.Second, Registerer: reg})
	ctx := context.Background()
	first := h.draw(t, e, billed("cmd", "bill-1"))
	second := make(chan error, 1)
	go func() { _, err := other.ExecuteLuckyGiftDraw(ctx, billed("cmd", "bill-2")); second <- err }()
	waitingFor(t, e, "INSERT IGNORE INTO lucky_pool_inflow_claims") // past its idempotency read, at the first's claim
	h.free()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	refused(t, <-second, "billing_receipt_id")
	if v, _ := testenv.Metric(reg, "roomflow_lucky_draw_retries_total", "reason", "duplicate_key"); v < 1 {
		t.Errorf("the other replica's batch was not retried on the unique key (%v retries)", v)
	}
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_draw_records WHERE billing_receipt_id = 'bill-1'`); n != 1 {
		t.Errorf("%d records of the first", n)
	}
	e.checkInvariants(t)
}

// TestConflictingRetryAfterALostCommit: the draw commits, its answer is
// lost and MySQL stays unreachable until draw_timeout (Unavailable); the
// client's retry with another billing_receipt_id is refused, the true
// retry answers the committed draw.
func TestConflictingRetryAfterALostCommit(t *testing.T) {
	var lose, down atomic.Bool
	hooks := unreachable(&down)
	hooks.Commit = func(stmts []string, commit func() error) error {
		if err := commit(); err != nil || !strings.Contains(strings.Join(stmts, ";"), "INSERT INTO lucky_draw_records") ||
			!lose.CompareAndSwap(true, false) {
			return err
		}
		down.Store(true)
		return driver.ErrBadConn
	}
	e := startHooked(t, luckydraw.Config{}, 100_000, hooks)
	ctx := context.Background()
	lose.Store(true)
	if _, err := e.client.ExecuteLuckyGiftDraw(ctx, billed("cmd", "bill-1")); status.Code(err) != codes.Unavailable {
		t.Fatalf("lost commit answer: %v, want Unavailable", err)
	}
	down.Store(false)
	var tier string
	if err := e.db.QueryRow(`SELECT selected_tier_id FROM lucky_draw_records WHERE command_id = 'cmd'`).Scan(&tier); err != nil {
		t.Fatalf("the draw did not commit: %v", err)
	}
	_, err := e.client.ExecuteLuckyGiftDraw(ctx, billed("cmd", "bill-2"))
	refused(t, err, "billing_receipt_id")
	if r, err := e.client.ExecuteLuckyGiftDraw(ctx, billed("cmd", "bill-1")); err != nil || r.Tier.GetTierId() != tier {
		t.Fatalf("true retry: %v %v, want the committed draw (tier %s)", r, err, tier)
	}
	e.checkInvariants(t)
}
