package rulestore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hyapp/roomflow/domain/lucky"
	"github.com/hyapp/roomflow/domain/lucky/rulestore"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/processors/room/roomtest"
)

func TestLoaderMariaDB(t *testing.T) {
	m := testenv.NewMySQL(t)
	ctx := context.Background()
	good := &lucky.Rule{GiftID: "rose", RuleVersion: "2026-01", GiftPrice: 10, PoolRatePPM: 50000, TargetPayoutRatePPM: 50000,
		PlatformWeightPPM: 200000, RoomWeightPPM: 300000, MaxSinglePayout: 5000, Status: "active",
		Tiers: []lucky.Tier{
			{TierID: "none", RewardType: "none", ProbabilityPPM: 950000, Enabled: true},
			{TierID: "small_1x", RewardType: "multiplier", RewardValue: 1, ProbabilityPPM: 50000, Enabled: false},
		}}
	roomtest.InsertRule(t, m.DB, good)
	bad := &lucky.Rule{GiftID: "rose", RuleVersion: "broken", PoolRatePPM: 50000, PlatformWeightPPM: 200000, RoomWeightPPM: 300000, Status: "active",
		Tiers: []lucky.Tier{{TierID: "none", RewardType: "none", ProbabilityPPM: 999999, Enabled: true}}}
	roomtest.InsertRule(t, m.DB, bad)

	l := newLoader(t, rulestore.Config{CacheSize: 100}, m)
	r, err := l.Get(ctx, "rose", "2026-01")
	if err != nil {
		t.Fatal(err)
	}
	if r.PoolRatePPM != 50000 || r.PlatformWeightPPM != 200000 || r.RoomWeightPPM != 300000 || len(r.Tiers) != 2 ||
		r.Tiers[1].TierID != "small_1x" || r.Tiers[1].Enabled || r.Tiers[1].ProbabilityPPM != 50000 {
		t.Fatalf("loaded %+v", r)
	}
	if _, err := l.Get(ctx, "rose", "broken"); !errors.Is(err, lucky.ErrInvalidRule) {
		t.Fatalf("invalid tier table loaded: %v", err)
	}
	if _, err := l.Get(ctx, "rose", "missing"); !errors.Is(err, lucky.ErrUnknownRule) {
		t.Fatalf("missing version: %v", err)
	}
	if _, err := l.Get(ctx, "tulip", "2026-01"); !errors.Is(err, lucky.ErrUnknownRule) {
		t.Fatalf("version of another gift used: %v", err)
	}

	// Versions are immutable: once loaded, the cache answers without MySQL.
	if _, err := m.DB.Exec(`DELETE FROM lucky_gift_rules`); err != nil {
		t.Fatal(err)
	}
	if r2, err := l.Get(ctx, "rose", "2026-01"); err != nil || r2 != r {
		t.Fatalf("cached version not served: %v", err)
	}
	// A database failure is an error that is neither unknown nor invalid.
	m.DB.Close()
	if _, err := newLoader(t, rulestore.Config{CacheSize: 10}, m).Get(ctx, "rose", "2026-01"); err == nil ||
		errors.Is(err, lucky.ErrUnknownRule) || errors.Is(err, lucky.ErrInvalidRule) {
		t.Fatalf("closed database: %v", err)
	}
}

// A version seen half-published (rule row visible, tiers not yet all
// there) is invalid only until MissTTL: once whole, it is found.
func TestLoaderRetriesHalfPublishedVersion(t *testing.T) {
	m := testenv.NewMySQL(t)
	ctx := context.Background()
	half := &lucky.Rule{GiftID: "lily", RuleVersion: "v1", PoolRatePPM: 50000, PlatformWeightPPM: 200000, RoomWeightPPM: 300000,
		Status: "active", Tiers: []lucky.Tier{{TierID: "none", RewardType: "none", ProbabilityPPM: 900000, Enabled: true}}}
	roomtest.InsertRule(t, m.DB, half)
	now := time.Unix(1_800_000_000, 0)
	l := newLoader(t, rulestore.Config{CacheSize: 10, Now: func() time.Time { return now }}, m)
	if _, err := l.Get(ctx, "lily", "v1"); !errors.Is(err, lucky.ErrInvalidRule) {
		t.Fatalf("half-published version: %v", err)
	}
	if _, err := m.DB.Exec(`INSERT INTO lucky_reward_tiers (gift_id, rule_version, tier_id, reward_type, reward_value,
		probability_ppm, min_pool_balance, enabled) VALUES ('lily', 'v1', 'small_1x', 'multiplier', 1, 100000, 0, TRUE)`); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Get(ctx, "lily", "v1"); !errors.Is(err, lucky.ErrInvalidRule) {
		t.Fatalf("within MissTTL the cached answer stands: %v", err)
	}
	now = now.Add(6 * time.Second)
	r, err := l.Get(ctx, "lily", "v1")
	if err != nil || len(r.Tiers) != 2 {
		t.Fatalf("whole version not found after MissTTL: %+v %v", r, err)
	}
}

func newLoader(t *testing.T, cfg rulestore.Config, m *testenv.MySQL) *rulestore.Loader {
	t.Helper()
	l, err := rulestore.New(cfg, m.DB)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestConfigValidate(t *testing.T) {
	if err := (rulestore.Config{}).Validate(); err != nil {
		t.Fatalf("zero config (defaults): %v", err)
	}
	for key, c := range map[string]rulestore.Config{
		"cache_size": {CacheSize: -1},
		"miss_ttl":   {MissTTL: -time.Second},
	} {
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "config: "+key+": ") {
			t.Errorf("%s: %v", key, err)
		}
	}
}
