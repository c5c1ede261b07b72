package loadgen

import (
	"context"
	"fmt"
	"sync"

	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/schemas/roomv1"
)

// DrawSummary counts what the draw service answered for a run's lucky
// gifts.
type DrawSummary struct {
	Draws, Hits       int
	RewardCoins       int64
	CoinSpent         int64
	Granted, Pending  int
	Rejected          map[string]int // reject_reason -> gifts (sent as lucky gifts without a draw)
	DrawIDs           []string
	DrawIDsByEventID  map[string]string
	FailedOrUndecided int
}

// DrawLucky sends every lucky RoomGiftSent of events through the draw
// service the way room-service does before it commits the gift (seed 003
// "Target Flow"): CheckLuckyGift, the debit (its billing_receipt_id, here a
// stand-in), ExecuteLuckyGiftDraw with the envelope's event id as
// command_id and the checked rule version, then the gift's draw_id and
// lucky_rule_version set from the answer, in place (Envelope and Payload),
// so the row written afterwards names its draw. concurrency draws run at
// once (room-service's many requests; the service group-commits them).
// A gift the check rejects keeps lucky=true with an empty draw_id and is
// counted under its reason: the oracle's inflow does not depend on the
// draw, and verify reports it as a gift without a draw.
func DrawLucky(ctx context.Context, client activityv1.LuckyGiftServiceClient, events []Event, concurrency int) (DrawSummary, error) {
	sum := DrawSummary{Rejected: map[string]int{}, DrawIDsByEventID: map[string]string{}}
	var mu sync.Mutex
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(max(concurrency, 1))
	for i := range events {
		e := &events[i]
		if e.Envelope.EventType != "RoomGiftSent" {
			continue
		}
		var gift roomv1.RoomGiftSent
		if err := proto.Unmarshal(e.Envelope.Payload, &gift); err != nil || !gift.Lucky {
			continue
		}
		g.Go(func() error {
			meta := &activityv1.LuckyGiftMeta{RequestId: e.Envelope.RequestId, CommandId: e.Envelope.EventId, RoomId: e.Envelope.RoomId,
				SenderUserId: gift.SenderUserId, TargetUserId: gift.TargetUserId, SentAtMs: e.Envelope.OccurredAtMs, AppCode: e.Envelope.AppCode}
			chk, err := client.CheckLuckyGift(ctx, &activityv1.CheckLuckyGiftRequest{Meta: meta, GiftId: gift.GiftId,
				GiftCount: gift.GiftCount, CoinSpent: gift.CoinSpent, HeatValue: gift.HeatValue})
			if err != nil {
				return fmt.Errorf("loadgen: check %s: %w", e.Envelope.EventId, err)
			}
			reason := chk.RejectReason
			var resp *activityv1.ExecuteLuckyGiftDrawResponse
			if chk.Enabled {
				resp, err = client.ExecuteLuckyGiftDraw(ctx, &activityv1.ExecuteLuckyGiftDrawRequest{Meta: meta, GiftId: gift.GiftId,
					GiftCount: gift.GiftCount, CoinSpent: gift.CoinSpent, HeatValue: gift.HeatValue,
					BillingReceiptId: gift.BillingReceiptId, RuleVersion: chk.RuleVersion})
				if err != nil {
					return fmt.Errorf("loadgen: draw %s: %w", e.Envelope.EventId, err)
				}
				reason = resp.RejectReason
			}
			mu.Lock()
			defer mu.Unlock()
			if reason != "" {
				sum.Rejected[reason]++
				gift.DrawId = ""
			} else {
				sum.Draws++
				sum.CoinSpent += gift.CoinSpent
				gift.DrawId, gift.LuckyRuleVersion = resp.DrawId, resp.RuleVersion
				sum.DrawIDs = append(sum.DrawIDs, resp.DrawId)
				sum.DrawIDsByEventID[e.Envelope.EventId] = resp.DrawId
				if resp.Hit {
					sum.Hits++
					sum.RewardCoins += resp.GetTier().GetRewardCoins()
				}
				switch resp.RewardStatus {
				case "GRANTED":
					sum.Granted++
				case "PENDING":
					sum.Pending++
				case "NONE":
				default:
					sum.FailedOrUndecided++
				}
			}
			body, err := proto.Marshal(&gift)
			if err != nil {
				return err
			}
			e.Envelope.Payload = body
			if e.Payload, err = proto.Marshal(e.Envelope); err != nil {
				return err
			}
			return nil
		})
	}
	return sum, g.Wait()
}
