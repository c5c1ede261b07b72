package loadgen

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/schemas/roomv1"
)

// DrawSummary counts what the draw service answered for a run's lucky
// gifts.
type DrawSummary struct {
	Draws, Hits      int
	RewardCoins      int64
	CoinSpent        int64
	Granted, Pending int
	// Rejected counts the rejected gifts by reject_reason: at Check (sent
	// as plain gifts, never debited) or at Execute (after the debit: a
	// recorded rejection the lucky gift names by its draw_id, refunded).
	Rejected map[string]int
	// Refunds is how many of Rejected were rejected at Execute.
	Refunds int
}

// Add counts o's draws into s (the draws of several DrawLucky calls).
func (s *DrawSummary) Add(o DrawSummary) {
	s.Draws += o.Draws
	s.Hits += o.Hits
	s.RewardCoins += o.RewardCoins
	s.CoinSpent += o.CoinSpent
	s.Granted += o.Granted
	s.Pending += o.Pending
	s.Refunds += o.Refunds
	if s.Rejected == nil {
		s.Rejected = map[string]int{}
	}
	for k, v := range o.Rejected {
		s.Rejected[k] += v
	}
}

// DrawLucky sends every lucky RoomGiftSent of events through the draw
// service the way room-service does before it commits the gift (LUCKY-2):
// CheckLuckyGift, the debit (its billing_receipt_id, here a stand-in),
// ExecuteLuckyGiftDraw with the envelope's event id as command_id and the
// checked rule version, then the gift's draw_id and lucky_rule_version set
// from the answer, in place (Envelope and Payload), so the row written
// afterwards names its draw. concurrency draws run at once (room-service's
// many requests; the service group-commits them). A gift the check rejects
// is sent as a plain gift (lucky=false: nothing was debited for a draw); one
// the draw rejects after the debit stays a lucky gift naming its recorded
// rejection's draw_id (refunded: its inflow enters no pool). Both are
// counted under their reason.
func DrawLucky(ctx context.Context, client activityv1.LuckyGiftServiceClient, events []Event, concurrency int) (DrawSummary, error) {
	sum := DrawSummary{Rejected: map[string]int{}}
	var mu sync.Mutex
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(max(concurrency, 1))
	for i := range events {
		e := &events[i]
		gift, ok := LuckyGift(e)
		if !ok {
			continue
		}
		g.Go(func() error {
			resp, reason, err := DrawGift(ctx, client, e, gift)
			if err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			if reason != "" {
				sum.Rejected[reason]++
				if resp == nil {
					return SetPlain(e, gift)
				}
				sum.Refunds++
				return SetDraw(e, gift, resp.DrawId, resp.RuleVersion)
			}
			sum.Draws++
			sum.CoinSpent += gift.CoinSpent
			if resp.Hit {
				sum.Hits++
				sum.RewardCoins += resp.GetTier().GetRewardCoins()
			}
			switch resp.RewardStatus {
			case "GRANTED":
				sum.Granted++
			case "PENDING":
				sum.Pending++
			}
			return SetDraw(e, gift, resp.DrawId, resp.RuleVersion)
		})
	}
	return sum, g.Wait()
}

// LuckyGift returns e's RoomGiftSent when e is a lucky gift (false for
// every other event, for a payload that does not decode and for a
// malformed row, which no stage reads as a gift).
func LuckyGift(e *Event) (*roomv1.RoomGiftSent, bool) {
	if e.Envelope.EventType != "RoomGiftSent" || e.Malformed {
		return nil, false
	}
	var gift roomv1.RoomGiftSent
	if err := proto.Unmarshal(e.Envelope.Payload, &gift); err != nil || !gift.Lucky {
		return nil, false
	}
	return &gift, true
}

// DrawGift sends one lucky gift through client as room-service does:
// CheckLuckyGift, then (when enabled) ExecuteLuckyGiftDraw with command_id
// = e's event id, the checked rule version and a stand-in debit receipt.
// It returns the draw's answer (a draw, or a recorded rejection with its
// draw_id and reject reason), or nil and the check's reject reason. Both calls follow ctx (its deadline is the
// caller's per-attempt budget); an Unavailable answer is asked again
// (retryUnavailable); an error means the draw's outcome is unknown: the same call again, on any replica, is idempotent by
// command_id. It changes neither e nor gift.
func DrawGift(ctx context.Context, client activityv1.LuckyGiftServiceClient, e *Event, gift *roomv1.RoomGiftSent) (*activityv1.ExecuteLuckyGiftDrawResponse, string, error) {
	chk, err := retryUnavailable(ctx, func() (*activityv1.CheckLuckyGiftResponse, error) { return CheckGift(ctx, client, e, gift) })
	if err != nil {
		return nil, "", err
	}
	if !chk.Enabled {
		return nil, chk.RejectReason, nil
	}
	resp, err := retryUnavailable(ctx, func() (*activityv1.ExecuteLuckyGiftDrawResponse, error) {
		return ExecuteGift(ctx, client, e, gift, chk.RuleVersion)
	})
	if err != nil {
		return nil, "", err
	}
	return resp, resp.RejectReason, nil
}

// unavailableAttempts bounds DrawGift's retries of an Unavailable answer
// (a draw timeout or a transient database error on a loaded machine).
const unavailableAttempts = 5

// retryUnavailable calls fn again, after a short pause, while it answers
// codes.Unavailable, as room-service does: the service asks for the same
// call again (the same command_id: a committed draw is returned, never
// drawn twice). Any other error, or the last attempt's, is returned.
func retryUnavailable[T any](ctx context.Context, fn func() (T, error)) (T, error) {
	for attempt := 1; ; attempt++ {
		v, err := fn()
		if err == nil || status.Code(err) != codes.Unavailable || attempt == unavailableAttempts {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(time.Duration(attempt) * 100 * time.Millisecond):
		}
	}
}

// giftMeta is the LuckyGiftMeta room-service sends for lucky gift e.
func giftMeta(e *Event, gift *roomv1.RoomGiftSent) *activityv1.LuckyGiftMeta {
	return &activityv1.LuckyGiftMeta{RequestId: e.Envelope.RequestId, CommandId: e.Envelope.EventId, RoomId: e.Envelope.RoomId,
		SenderUserId: gift.SenderUserId, TargetUserId: gift.TargetUserId, SentAtMs: e.Envelope.OccurredAtMs, AppCode: e.Envelope.AppCode}
}

// CheckGift is DrawGift's CheckLuckyGift alone: it stores nothing, so a
// caller may send the gift plain when it is not enabled, but only while
// no ExecuteLuckyGiftDraw of the gift may have been sent.
func CheckGift(ctx context.Context, client activityv1.LuckyGiftServiceClient, e *Event, gift *roomv1.RoomGiftSent) (*activityv1.CheckLuckyGiftResponse, error) {
	chk, err := client.CheckLuckyGift(ctx, &activityv1.CheckLuckyGiftRequest{Meta: giftMeta(e, gift), GiftId: gift.GiftId,
		GiftCount: gift.GiftCount, CoinSpent: gift.CoinSpent, HeatValue: gift.HeatValue})
	if err != nil {
		return nil, fmt.Errorf("loadgen: check %s: %w", e.Envelope.EventId, err)
	}
	return chk, nil
}

// ExecuteGift is DrawGift's ExecuteLuckyGiftDraw alone, under ruleVersion:
// what a retry of a gift already debited (or already written) sends,
// since its outcome must be a draw or a recorded rejection, never a
// Check's unrecorded reject. Idempotent by command_id.
func ExecuteGift(ctx context.Context, client activityv1.LuckyGiftServiceClient, e *Event, gift *roomv1.RoomGiftSent, ruleVersion string) (*activityv1.ExecuteLuckyGiftDrawResponse, error) {
	resp, err := client.ExecuteLuckyGiftDraw(ctx, &activityv1.ExecuteLuckyGiftDrawRequest{Meta: giftMeta(e, gift), GiftId: gift.GiftId,
		GiftCount: gift.GiftCount, CoinSpent: gift.CoinSpent, HeatValue: gift.HeatValue,
		BillingReceiptId: gift.BillingReceiptId, RuleVersion: ruleVersion})
	if err != nil {
		return nil, fmt.Errorf("loadgen: draw %s: %w", e.Envelope.EventId, err)
	}
	return resp, nil
}

// SetDraw names drawID and ruleVersion in lucky gift e (gift is its
// decoded RoomGiftSent), in place: gift, Envelope.Payload and Payload, so
// the row written afterwards carries them.
func SetDraw(e *Event, gift *roomv1.RoomGiftSent, drawID, ruleVersion string) error {
	gift.DrawId, gift.LuckyRuleVersion = drawID, ruleVersion
	return rewrite(e, gift)
}

// SetPlain makes lucky gift e a plain gift, in place (what room-service
// sends after CheckLuckyGift rejected it).
func SetPlain(e *Event, gift *roomv1.RoomGiftSent) error {
	gift.Lucky, gift.DrawId, gift.LuckyRuleVersion = false, "", ""
	return rewrite(e, gift)
}

// rewrite stores gift as e's payload.
func rewrite(e *Event, gift *roomv1.RoomGiftSent) error {
	body, err := proto.Marshal(gift)
	if err != nil {
		return err
	}
	e.Envelope.Payload = body
	e.Payload, err = proto.Marshal(e.Envelope)
	return err
}
