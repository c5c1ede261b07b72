package luckydraw_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hyapp/roomflow/domain/lucky"
	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/services/luckydraw"
	"github.com/hyapp/roomflow/services/luckydraw/simulate"
)

// randomSeq is a Config.Random hook: the same seed, the same values.
func randomSeq(seed uint64) func() (int64, error) {
	r := rand.New(rand.NewPCG(seed, seed))
	return func() (int64, error) { return r.Int64N(lucky.PPM), nil }
}

// The simulator and the live service (MariaDB) fed the same random values
// through Config.Random, the same rule, pools and draws: every draw has
// the same filtered candidate table and the same tier, through caps and
// floors that bind.
func TestSimulatorMatchesLiveService(t *testing.T) {
	const fund, roomFund, floor = 20_000, 3_000, 100
	startMs := time.Date(2026, 12, 7, 22, 30, 0, 0, time.UTC).UnixMilli() // the run crosses a UTC day and hours
	var now atomic.Int64
	e := start(t, luckydraw.Config{Random: randomSeq(42), Now: func() time.Time { return time.UnixMilli(now.Load()) }}, fund)
	edit := func(r *lucky.Rule) {
		r.MaxUserDailyPayout, r.MaxRoomHourlyPayout = 2_500, 6_000
		r.Tiers[2].MinPoolBalance = 2_900 // the room pools hover about it
	}
	publishV2(t, e, edit)
	rooms := 2
	for i := range rooms {
		f := int64(floor)
		if _, err := testAdmin(t, e.db).FundPool(context.Background(), app, "room", "room-"+strconv.Itoa(i), roomFund, &f); err != nil {
			t.Fatal(err)
		}
	}
	r := rule("v2", 0)
	edit(&r)
	var traces []simulate.Trace
	_, err := simulate.Run(simulate.Config{Rules: []*lucky.Rule{&r}, Platform: simulate.Pool{Balance: fund, ReserveFloor: floor},
		Gift: simulate.Pool{Balance: fund, ReserveFloor: floor}, Room: simulate.Pool{Balance: roomFund, ReserveFloor: floor}, LargeTierEnabled: true,
		Traffic: simulate.Traffic{Rooms: rooms, Users: 6, RoomSkew: 1, UserSkew: 1, Draws: 240, Hours: 3,
			GiftMix: []simulate.GiftShare{{GiftID: "rose", GiftCount: 1, Weight: 3}, {GiftID: "rose", GiftCount: 4, Weight: 1}}},
		StartMs: startMs, Seed: 5, Random: randomSeq(42), Trace: func(tr simulate.Trace) { traces = append(traces, tr) }})
	if err != nil {
		t.Fatal(err)
	}
	removed := map[string]int{}
	for i, tr := range traces {
		now.Store(tr.NowMs)
		resp, err := e.client.ExecuteLuckyGiftDraw(context.Background(), &activityv1.ExecuteLuckyGiftDrawRequest{
			Meta: &activityv1.LuckyGiftMeta{CommandId: "sim-" + strconv.Itoa(i), RoomId: tr.RoomID, SenderUserId: tr.SenderID,
				TargetUserId: tr.TargetID, DeviceId: tr.DeviceID, RequestId: "req"},
			GiftId: tr.GiftID, RuleVersion: "v2", GiftCount: tr.GiftCount, CoinSpent: tr.CoinSpent, HeatValue: tr.CoinSpent})
		if err != nil || resp.RejectReason != "" {
			t.Fatalf("draw %d: %v %v", i, resp, err)
		}
		var raw []byte
		var random int64
		if err := e.db.QueryRow(`SELECT candidate_tiers_json, random_value FROM lucky_draw_records WHERE draw_id = ?`, resp.DrawId).Scan(&raw, &random); err != nil {
			t.Fatal(err)
		}
		var live []luckydraw.Candidate
		if err := json.Unmarshal(raw, &live); err != nil {
			t.Fatal(err)
		}
		if random != tr.Random || !reflect.DeepEqual(live, tr.Candidates) || resp.GetTier().GetTierId() != tr.TierID || resp.GetTier().GetRewardCoins() != tr.RewardCoins {
			t.Fatalf("draw %d (%+v) differs:\nlive random %d tier %s reward %d table %+v\nsim  random %d tier %s reward %d table %+v",
				i, tr, random, resp.GetTier().GetTierId(), resp.GetTier().GetRewardCoins(), live, tr.Random, tr.TierID, tr.RewardCoins, tr.Candidates)
		}
		for _, c := range live {
			if c.Disabled != "" {
				removed[c.Disabled]++
			}
		}
	}
	// The comparison means something only where the filters acted.
	for _, why := range []string{luckydraw.DisabledRisk, luckydraw.DisabledWaterline, luckydraw.DisabledPool} {
		if removed[why] == 0 {
			t.Errorf("no draw had a tier removed by %s: %v", why, removed)
		}
	}
	e.checkInvariants(t)
}
