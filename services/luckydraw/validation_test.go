package luckydraw_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/schemas/envelope"
	"github.com/hyapp/roomflow/services/luckydraw"
)

// No debit without a record (design.md, D-LUCKY-1): room-service debits
// after an enabled Check, so Check refuses every field Execute would
// refuse, and Execute records a debited request it cannot draw as a
// rejection with its refund event. The audit's evidence: a client_seed of
// 65 bytes, a device_id of 129 or a gift_count of 0 passed Check and left
// Execute answering InvalidArgument with nothing stored.

// checkOf is the CheckLuckyGiftRequest room-service sends before the
// debit of r.
func checkOf(r *activityv1.ExecuteLuckyGiftDrawRequest) *activityv1.CheckLuckyGiftRequest {
	return &activityv1.CheckLuckyGiftRequest{Meta: r.Meta, GiftId: r.GiftId, GiftCount: r.GiftCount, CoinSpent: r.CoinSpent,
		HeatValue: r.HeatValue}
}

// TestCheckRefusesWhatExecuteRefuses: a Check carrying a field Execute
// would refuse answers InvalidArgument naming it, so room-service does not
// debit. A field left out (zero: the seed's Check needs only room and
// gift) is no error; the same request with every field valid is enabled.
func TestCheckRefusesWhatExecuteRefuses(t *testing.T) {
	e := start(t, luckydraw.Config{}, 100_000)
	ctx := context.Background()
	full := drawReq("chk", 1)
	full.Meta.ClientSeed, full.Meta.AppCode = "seed", app
	for name, req := range map[string]*activityv1.CheckLuckyGiftRequest{
		"every field":        checkOf(full),
		"room and gift only": {Meta: &activityv1.LuckyGiftMeta{RoomId: "r1"}, GiftId: "rose"},
	} {
		if r, err := e.client.CheckLuckyGift(ctx, req); err != nil || !r.Enabled {
			t.Errorf("%s: %v %v, want enabled", name, r, err)
		}
	}
	long := func(n int) string { return strings.Repeat("x", n+1) }
	for name, tc := range map[string]struct {
		edit  func(*activityv1.ExecuteLuckyGiftDrawRequest)
		field string
	}{
		"long client_seed":    {func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.Meta.ClientSeed = long(64) }, "meta.client_seed"},
		"long device_id":      {func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.Meta.DeviceId = long(128) }, "meta.device_id"},
		"long request_id":     {func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.Meta.RequestId = long(128) }, "meta.request_id"},
		"long command_id":     {func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.Meta.CommandId = long(128) }, "meta.command_id"},
		"padded command_id":   {func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.Meta.CommandId = "chk " }, "meta.command_id"},
		"long app_code":       {func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.Meta.AppCode = long(32) }, "meta.app_code"},
		"negative sender":     {func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.Meta.SenderUserId = -1 }, "meta.sender_user_id"},
		"negative target":     {func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.Meta.TargetUserId = -1 }, "meta.target_user_id"},
		"negative gift_count": {func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.GiftCount = -1 }, "gift_count"},
		"negative coins":      {func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.CoinSpent = -1 }, "coin_spent"},
		"heat over bound":     {func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.HeatValue = envelope.MaxGiftCoins + 1 }, "heat_value"},
	} {
		req := proto.Clone(full).(*activityv1.ExecuteLuckyGiftDrawRequest)
		tc.edit(req)
		r, err := e.client.CheckLuckyGift(ctx, checkOf(req))
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.field) {
			t.Errorf("%s: Check answered %v %v, want InvalidArgument naming %s", name, r, err, tc.field)
		}
	}
}

// TestUndrawableRequestIsARecordedRejection: a request whose key fields
// (app_code, command_id, room_id, gift_id, billing_receipt_id, coin_spent)
// are valid but which Execute cannot draw (a client_seed or device_id too
// long, no sender, no gift_count, ...) is stored as a rejection with
// reason invalid_request and its LuckyDrawRejected, the values that do not
// fit their columns clipped or blanked; a repeat answers the stored
// rejection. Before, each answered InvalidArgument and stored nothing.
func TestUndrawableRequestIsARecordedRejection(t *testing.T) {
	e := start(t, luckydraw.Config{}, 100_000)
	ctx := context.Background()
	type stored struct {
		device, request, seed, version string
		sender, target, heat           int64
		count                          int32
	}
	want := stored{device: "dev-", request: "req", version: "v1", sender: 7, target: 900, heat: 100, count: 1}
	cases := map[string]struct {
		edit func(*activityv1.ExecuteLuckyGiftDrawRequest)
		want func(*stored)
	}{
		"long client_seed": {func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.Meta.ClientSeed = strings.Repeat("s", 65) },
			func(s *stored) {}}, // no draw: no seed to keep
		"long device_id": {func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.Meta.DeviceId = strings.Repeat("é", 65) }, // 130 bytes
			func(s *stored) { s.device = strings.Repeat("é", 64) }},
		"long request_id": {func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.Meta.RequestId = strings.Repeat("q", 129) },
			func(s *stored) { s.request = strings.Repeat("q", 128) }},
		"long rule_version": {func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.RuleVersion = strings.Repeat("v", 65) },
			func(s *stored) {}}, // names no version: the deciding one
		"gift_count 0":    {func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.GiftCount = 0 }, func(s *stored) { s.count = 0 }},
		"sender 0":        {func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.Meta.SenderUserId = 0 }, func(s *stored) { s.sender = 0 }},
		"negative target": {func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.Meta.TargetUserId = -1 }, func(s *stored) { s.target = -1 }},
		"heat over bound": {func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.HeatValue = envelope.MaxGiftCoins + 1 },
			func(s *stored) { s.heat = envelope.MaxGiftCoins + 1 }},
	}
	for name, tc := range cases {
		cmd := "u-" + strings.ReplaceAll(name, " ", "-")
		req := drawReq(cmd, 7)
		req.BillingReceiptId = "bill-" + cmd
		tc.edit(req)
		w := want
		if w.device == "dev-" {
			w.device += cmd
		}
		tc.want(&w)
		resp, err := e.client.ExecuteLuckyGiftDraw(ctx, req)
		if err != nil || resp.RejectReason != "invalid_request" || resp.DrawId != luckydraw.DrawID(app, cmd) || resp.Hit {
			t.Errorf("%s: Execute answered %v %v, want the recorded rejection invalid_request", name, resp, err)
			continue
		}
		var got stored
		var status, reason, receipt string
		var coins int64
		if err := e.db.QueryRow(`SELECT reward_status, reject_reason, billing_receipt_id, coin_spent, device_id, request_id,
	client_seed, rule_version, sender_user_id, target_user_id, heat_value, gift_count FROM lucky_draw_records WHERE app_code = ? AND command_id = ?`,
			app, cmd).Scan(&status, &reason, &receipt, &coins, &got.device, &got.request, &got.seed, &got.version, &got.sender,
			&got.target, &got.heat, &got.count); err != nil {
			t.Fatalf("%s: no row: %v", name, err)
		}
		if status != luckydraw.RewardRejected || reason != "invalid_request" || receipt != req.BillingReceiptId || coins != 100 || got != w {
			t.Errorf("%s: stored %s %s %s %d %+v, want rejected invalid_request with %+v", name, status, reason, receipt, coins, got, w)
		}
		rejectedEvent(t, e, cmd, "invalid_request", req.BillingReceiptId)
		again, err := e.client.ExecuteLuckyGiftDraw(ctx, req)
		if err != nil || !proto.Equal(again, resp) {
			t.Errorf("%s: repeat answered %v %v, want the stored %v", name, again, err, resp)
		}
	}
	// gRPC refuses a string field of invalid UTF-8 before the service; a
	// caller in the process reaches its check, and the seed is not kept.
	bad := drawReq("u-utf8", 7)
	bad.Meta.ClientSeed = "ok\xff"
	if resp, err := e.svc.ExecuteLuckyGiftDraw(ctx, bad); err != nil || resp.RejectReason != "invalid_request" {
		t.Errorf("non-UTF-8 client_seed: %v %v", resp, err)
	}
	n := int64(len(cases) + 1)
	if got := e.count(t, `SELECT COUNT(*) FROM lucky_draw_records WHERE reward_status = 'rejected' AND reject_reason = 'invalid_request' AND client_seed = ''`); got != n {
		t.Errorf("%d invalid_request rejections without a seed, want %d", got, n)
	}
	if v, _ := testenv.Metric(e.reg, "roomflow_lucky_draw_rejects_total", "rpc", "ExecuteLuckyGiftDraw", "reason", "invalid_request"); int64(v) != n {
		t.Errorf("%v invalid_request rejections counted, want %d (repeats are duplicates)", v, n)
	}
	if v, _ := testenv.Metric(e.reg, "roomflow_lucky_draws_total", "outcome", "invalid"); v != 0 {
		t.Errorf("outcome=invalid counted %v: these requests had a key to record under", v)
	}
	// Nothing drawn: no inflow, no payout, no counter.
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_risk_counters`) + e.count(t, `SELECT SUM(total_in + total_out) FROM lucky_pools`); n != 0 {
		t.Errorf("undrawn requests touched the counters or pools: %d", n)
	}
	e.checkInvariants(t)
}

// rejectedEvent asserts cmd's one LuckyDrawRejected (reason, receipt,
// coins) and the claim that keeps its inflow out of the pools.
func rejectedEvent(t *testing.T, e *env, cmd, reason, receipt string) {
	t.Helper()
	drawID := luckydraw.DrawID(app, cmd)
	var payload []byte
	var n int
	if err := e.db.QueryRow(`SELECT COUNT(*), MAX(payload) FROM lucky_outbox WHERE message_type = 'LuckyDrawRejected' AND aggregate_id = ?`,
		drawID).Scan(&n, &payload); err != nil || n != 1 {
		t.Fatalf("%s: %d LuckyDrawRejected rows (%v), want 1", cmd, n, err)
	}
	var ev activityv1.LuckyDrawRejected
	if err := proto.Unmarshal(payload, &ev); err != nil || ev.Reason != reason || ev.BillingReceiptId != receipt || ev.CoinSpent != 100 ||
		ev.CommandId != cmd || ev.RoomId != "r1" || ev.GiftId != "rose" {
		t.Fatalf("%s: LuckyDrawRejected %v (%v)", cmd, &ev, err)
	}
	var by string
	if err := e.db.QueryRow(`SELECT claimed_by FROM lucky_pool_inflow_claims WHERE app_code = ? AND draw_id = ?`, app, drawID).Scan(&by); err != nil ||
		by != luckydraw.ClaimedByRejection {
		t.Fatalf("%s: inflow claim %q (%v)", cmd, by, err)
	}
}

// TestCheckedRequestEndsInAnOutcome is the audit's probe: whatever a
// client's field holds, either Check refuses it (no debit) or Execute
// stores an outcome; now both hold, since room-service may leave the
// field out of its Check.
func TestCheckedRequestEndsInAnOutcome(t *testing.T) {
	e := start(t, luckydraw.Config{}, 100_000)
	ctx := context.Background()
	for name, edit := range map[string]func(*activityv1.ExecuteLuckyGiftDrawRequest){
		"client_seed_65_bytes": func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.Meta.ClientSeed = strings.Repeat("a", 65) },
		"device_id_129_bytes":  func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.Meta.DeviceId = strings.Repeat("d", 129) },
		"gift_count_0":         func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.GiftCount = 0 },
		"sender_0":             func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.Meta.SenderUserId = 0 },
	} {
		req := drawReq("cmd-"+name, 42)
		edit(req)
		chk, err := e.client.CheckLuckyGift(ctx, checkOf(req))
		// A zero count or sender is a field left out to Check.
		leftOut := req.GiftCount == 0 || req.Meta.SenderUserId == 0
		if leftOut != (err == nil && chk.Enabled) || !leftOut && status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: Check answered %v %v", name, chk, err)
		}
		if _, err := e.client.ExecuteLuckyGiftDraw(ctx, req); err != nil {
			t.Errorf("%s: Execute answered %v", name, err)
		}
		if n := e.count(t, "SELECT COUNT(*) FROM lucky_draw_records WHERE command_id = ?", req.Meta.CommandId); n != 1 {
			t.Errorf("%s: %d outcomes stored, want 1: a debit without a draw or rejection", name, n)
		}
	}
}
