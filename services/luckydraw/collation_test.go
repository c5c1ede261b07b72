package luckydraw_test

import (
	"context"
	"testing"

	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/services/luckydraw"
)

// TestIDsDifferingOnlyInCase: a command, room or device id that differs
// from another only in letter case is another one (docs/reliability.md
// finding 12): its own draw, its own room pool, its own device counter.
// The service keys them in Go by their bytes; under the tables' old
// case-insensitive collation the second command's record collided with the
// first's (a duplicate key until the draw timed out), the second room's
// pool row read back as the first's ("missing after insert"), and the
// second device's capped counter came back under the first's key.
func TestIDsDifferingOnlyInCase(t *testing.T) {
	e := start(t, luckydraw.Config{MaxDeviceDailyPayout: 1_000_000}, 100_000)
	ctx := context.Background()
	for _, mut := range []func(*activityv1.ExecuteLuckyGiftDrawRequest){
		func(*activityv1.ExecuteLuckyGiftDrawRequest) {},
		func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.Meta.CommandId = "CMD-A"; r.Meta.DeviceId = "dev-b" },
		func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.Meta.CommandId = "cmd-c"; r.Meta.RoomId = "R1" },
		func(r *activityv1.ExecuteLuckyGiftDrawRequest) { r.Meta.CommandId = "cmd-d"; r.Meta.DeviceId = "DEV-A" },
	} {
		req := drawReq("cmd-a", 1)
		req.Meta.DeviceId = "dev-a"
		mut(req)
		for try := range 2 { // the repeat answers the stored draw
			res, err := e.client.ExecuteLuckyGiftDraw(ctx, req)
			if err != nil || res.DrawId != luckydraw.DrawID(app, req.Meta.CommandId) || res.RejectReason != "" {
				t.Fatalf("command %s, try %d: %v %v", req.Meta.CommandId, try, res, err)
			}
		}
	}
	for q, want := range map[string]int64{
		"SELECT COUNT(*) FROM lucky_draw_records":                                 4,
		"SELECT COUNT(*) FROM lucky_pools WHERE scope_type = 'room'":              2,
		"SELECT COUNT(*) FROM lucky_risk_counters WHERE scope_type = 'device'":    3,
		"SELECT COUNT(*) FROM lucky_pool_inflow_claims WHERE claimed_by = 'draw'": 4,
	} {
		if n := e.count(t, q); n != want {
			t.Errorf("%s: %d, want %d", q, n, want)
		}
	}
	e.checkInvariants(t)
}
