// Package rulestore reads lucky rule versions (lucky.Rule) from MySQL
// (lucky_gift_rules and lucky_reward_tiers) and caches them. Versions are
// immutable once published, so a cached version never goes stale and
// replays are exact.
//
// It is apart from package lucky so that the model and its arithmetic stay
// free of I/O; the room processor and the draw service both load through
// it.
package rulestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hyapp/roomflow/domain/lucky"
	"github.com/hyapp/roomflow/internal/cfgerr"
)

// Loader reads rule versions from MySQL and caches them. Versions are immutable once
// published, so a valid version is cached until evicted by size. A missing
// or invalid version is remembered only for Config.MissTTL (5s): a
// writer that inserts the rule row and its tiers in separate statements
// makes a version briefly visible half-published, and it must be found
// whole moments later rather than stay invalid for good.
//
// Get is safe for concurrent use.
type Loader struct {
	db      *sql.DB
	max     int
	missTTL time.Duration
	now     func() time.Time

	mu    sync.Mutex
	cache map[ruleKey]cached
}

type ruleKey struct{ gift, version string }

type cached struct {
	rule      *lucky.Rule
	err       error     // lucky.ErrInvalidRule (wrapped) or lucky.ErrUnknownRule
	expiresAt time.Time // zero: never (valid versions)
}

// Config configures New.
type Config struct {
	// CacheSize is how many rule versions the loader caches. Default
	// 10,000.
	CacheSize int
	// MissTTL is how long a missing or invalid version is remembered
	// before MySQL is asked again. Default 5s.
	MissTTL time.Duration
	// Now is the clock of the MissTTL expiry. Default time.Now.
	Now func() time.Time
}

func (c *Config) setDefaults() {
	cfgerr.Default(&c.CacheSize, 10000)
	cfgerr.Default(&c.MissTTL, 5*time.Second)
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Validate reports the invalid fields of c with its defaults applied,
// keyed "cache_size" and "miss_ttl".
func (c Config) Validate() error {
	c.setDefaults()
	var ch cfgerr.Checks
	ch.Positive("cache_size", c.CacheSize)
	ch.PositiveDuration("miss_ttl", c.MissTTL)
	return ch.Err()
}

// New returns a loader of the rules in db.
func New(cfg Config, db *sql.DB) (*Loader, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if db == nil {
		return nil, errors.New("lucky: nil database")
	}
	return &Loader{db: db, max: cfg.CacheSize, missTTL: cfg.MissTTL, now: cfg.Now, cache: map[ruleKey]cached{}}, nil
}

// Get returns the validated rule version. Errors: lucky.ErrUnknownRule (no such
// version), an error wrapping lucky.ErrInvalidRule (the version fails Validate),
// or a database error (transient; retry).
func (l *Loader) Get(ctx context.Context, giftID, version string) (*lucky.Rule, error) {
	k := ruleKey{giftID, version}
	l.mu.Lock()
	c, ok := l.cache[k]
	l.mu.Unlock()
	if ok && (c.expiresAt.IsZero() || l.now().Before(c.expiresAt)) {
		return c.rule, c.err
	}
	r, err := l.load(ctx, giftID, version)
	switch {
	case errors.Is(err, lucky.ErrUnknownRule), errors.Is(err, lucky.ErrInvalidRule):
		c = cached{err: err, expiresAt: l.now().Add(l.missTTL)}
	case err != nil:
		return nil, err // not cached
	default:
		c = cached{rule: r}
	}
	l.mu.Lock()
	if len(l.cache) >= l.max {
		for ek := range l.cache { // evict an arbitrary entry
			delete(l.cache, ek)
			break
		}
	}
	l.cache[k] = c
	l.mu.Unlock()
	return c.rule, c.err
}

func (l *Loader) load(ctx context.Context, giftID, version string) (*lucky.Rule, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	r := &lucky.Rule{}
	err := l.db.QueryRowContext(ctx, `SELECT gift_id, rule_version, gift_price, pool_rate_ppm,
	target_payout_rate_ppm, platform_weight_ppm, room_weight_ppm, max_single_payout,
	max_user_daily_payout, max_room_hourly_payout, status, effective_at_ms
FROM lucky_gift_rules WHERE gift_id = ? AND rule_version = ?`, giftID, version).Scan(
		&r.GiftID, &r.RuleVersion, &r.GiftPrice, &r.PoolRatePPM, &r.TargetPayoutRatePPM,
		&r.PlatformWeightPPM, &r.RoomWeightPPM, &r.MaxSinglePayout, &r.MaxUserDailyPayout,
		&r.MaxRoomHourlyPayout, &r.Status, &r.EffectiveAtMs)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("lucky: load rule %s/%s: %w", giftID, version, err)
	}
	// The table's collation matches "ROSE" and "v1 " to rose/v1; gift ids
	// are byte exact at every stage, so such a row is another gift's.
	if err != nil || r.GiftID != giftID || r.RuleVersion != version {
		return nil, fmt.Errorf("%w: gift %q version %q", lucky.ErrUnknownRule, giftID, version)
	}
	rows, err := l.db.QueryContext(ctx, `SELECT tier_id, reward_type, reward_value, probability_ppm,
	min_pool_balance, enabled, large
FROM lucky_reward_tiers WHERE gift_id = ? AND rule_version = ? ORDER BY tier_id`, giftID, version)
	if err != nil {
		return nil, fmt.Errorf("lucky: load tiers %s/%s: %w", giftID, version, err)
	}
	defer rows.Close()
	for rows.Next() {
		var t lucky.Tier
		if err := rows.Scan(&t.TierID, &t.RewardType, &t.RewardValue, &t.ProbabilityPPM, &t.MinPoolBalance, &t.Enabled, &t.Large); err != nil {
			return nil, fmt.Errorf("lucky: scan tier %s/%s: %w", giftID, version, err)
		}
		r.Tiers = append(r.Tiers, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("lucky: load tiers %s/%s: %w", giftID, version, err)
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return r, nil
}
