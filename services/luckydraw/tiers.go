package luckydraw

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyapp/roomflow/domain/lucky"
)

// ErrTierRefused is a tier switch that would break the version's table
// or touch a version that is not live: the none tier cannot be disabled
// (it takes the probability of every disabled tier), and a draft or
// retired version's tiers are its published content (publish a new
// version instead). Nothing was changed.
var ErrTierRefused = errors.New("luckydraw: tier switch refused")

// ErrUnknownTier is a tier switch naming a tier its version does not have.
var ErrUnknownTier = errors.New("luckydraw: unknown tier")

// SetTierEnabled switches one tier of a published version on or off at
// run time (`roomflow lucky tier enable|disable`). enabled is the one
// mutable column of a published version: the draw reads it in its
// transaction after the fence (withLiveTiers), so when this returns no
// draw that still sees the old value can commit, and every draw's
// candidate_tiers_json records the tier as it was drawn (tier_disabled),
// which is what `lucky audit` replays. Errors: lucky.ErrUnknownRule (no
// such gift or version), ErrUnknownTier, ErrTierRefused (the none tier
// switched off; a draft or retired version), ErrFenceWait.
func (a *Admin) SetTierEnabled(ctx context.Context, gift, version, tier string, enabled bool) (Change, error) {
	target := gift + "/" + version + "/" + tier
	out, err := a.change(ctx, func(tx *sql.Tx, _ int64) ([]Change, error) {
		var status string
		switch err := tx.QueryRowContext(ctx, `SELECT status FROM lucky_gift_rules WHERE gift_id = ? AND rule_version = ? FOR UPDATE`,
			gift, version).Scan(&status); {
		case errors.Is(err, sql.ErrNoRows):
			return nil, fmt.Errorf("%w: gift %q version %q", lucky.ErrUnknownRule, gift, version)
		case err != nil:
			return nil, err
		}
		if status == "draft" || status == "retired" {
			return nil, fmt.Errorf("%w: %s/%s is %s (its tiers are its published content; publish a new version)", ErrTierRefused, gift, version, status)
		}
		var rewardType string
		var was bool
		switch err := tx.QueryRowContext(ctx, `SELECT reward_type, enabled FROM lucky_reward_tiers WHERE gift_id = ? AND rule_version = ?
	AND tier_id = ? FOR UPDATE`, gift, version, tier).Scan(&rewardType, &was); {
		case errors.Is(err, sql.ErrNoRows):
			return nil, fmt.Errorf("%w: %s", ErrUnknownTier, target)
		case err != nil:
			return nil, err
		}
		if rewardType == "none" && !enabled {
			return nil, fmt.Errorf("%w: %s is the none tier, which takes the probability of the disabled tiers", ErrTierRefused, target)
		}
		c := Change{Command: "tier", Target: target, Old: onOff(was), New: onOff(enabled)}
		if status == "paused" {
			c.Note = target + " is paused: the change applies when it draws again"
		}
		_, err := tx.ExecContext(ctx, `UPDATE lucky_reward_tiers SET enabled = ? WHERE gift_id = ? AND rule_version = ? AND tier_id = ?`,
			enabled, gift, version, tier)
		return []Change{c}, err
	})
	if err != nil {
		return Change{}, fmt.Errorf("luckydraw: tier %s: %w", target, err)
	}
	return out[0], nil
}

// withLiveTiers returns rules (the loader's cached versions, one per draw)
// with each tier's enabled as the draw transaction read it after the
// fence (b.tiers, readFenced): the loader caches versions for good, and
// enabled is the one column an operator changes after publishing.
func (b *batchTx) withLiveTiers(rules []*lucky.Rule) []*lucky.Rule {
	live := map[tierVersion]*lucky.Rule{}
	out := make([]*lucky.Rule, len(rules))
	for i, r := range rules {
		k := tierVersion{r.GiftID, r.RuleVersion}
		if live[k] == nil {
			c := *r
			c.Tiers = slices.Clone(r.Tiers)
			for j, t := range c.Tiers {
				if on, ok := b.tiers[k][t.TierID]; ok {
					c.Tiers[j].Enabled = on
				}
			}
			live[k] = &c
		}
		out[i] = live[k]
	}
	return out
}

// MarksLargeTiers reports whether r marks any tier large: then
// large_tier_enabled switches exactly those off, and
// lucky.large_tier_min_reward does not apply to r.
func MarksLargeTiers(r *lucky.Rule) bool {
	return slices.ContainsFunc(r.Tiers, func(t lucky.Tier) bool { return t.Large })
}

// isLarge is whether tier t, paying reward, is large in a rule that
// marks tiers (marked) or not: a marking rule decides by its marks, an
// unmarked one by minReward (0: no tier is large).
func isLarge(marked bool, t lucky.Tier, reward, minReward int64) bool {
	if marked {
		return t.Large
	}
	return minReward > 0 && reward >= minReward
}

// unmarkedLargeWarning is rules publish's warning for an active version
// that marks no tier large: large_tier_enabled off then reaches it only
// through lucky.large_tier_min_reward, and not at all when that is 0.
func (a *Admin) unmarkedLargeWarning(r *lucky.Rule) string {
	if r.Status != "active" || MarksLargeTiers(r) {
		return ""
	}
	if a.cfg.LargeTierMinReward <= 0 {
		return fmt.Sprintf("%s/%s marks no tier large (large: true) and lucky.large_tier_min_reward is 0: large_tier_enabled off disables none of its tiers",
			r.GiftID, r.RuleVersion)
	}
	return fmt.Sprintf("%s/%s marks no tier large (large: true): large_tier_enabled off disables its tiers paying at least lucky.large_tier_min_reward (%d coins)",
		r.GiftID, r.RuleVersion, a.cfg.LargeTierMinReward)
}

// largeTierSwitchNote says, in the transaction of `switch
// large_tier_enabled off`, how many enabled tiers of active versions are
// marked large (what the switch disables), and warns when none is.
func (a *Admin) largeTierSwitchNote(ctx context.Context, tx *sql.Tx, c *Change) error {
	var marked, unmarked int64
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(SUM(t.large AND t.enabled), 0),
	COUNT(DISTINCT CASE WHEN NOT EXISTS (SELECT 1 FROM lucky_reward_tiers m WHERE m.gift_id = r.gift_id
		AND m.rule_version = r.rule_version AND m.large) THEN r.id END)
FROM lucky_gift_rules r JOIN lucky_reward_tiers t ON t.gift_id = r.gift_id AND t.rule_version = r.rule_version
WHERE r.status = 'active'`).Scan(&marked, &unmarked); err != nil {
		return fmt.Errorf("luckydraw: count large tiers: %w", err)
	}
	c.Note = fmt.Sprintf("disables %d enabled tiers marked large in active versions", marked)
	if unmarked > 0 {
		c.Note += fmt.Sprintf("; in the %d active versions that mark none, the tiers paying at least lucky.large_tier_min_reward (%d coins; 0: none)",
			unmarked, a.cfg.LargeTierMinReward)
	}
	if marked == 0 {
		c.Warning = "no active version marks a large tier (large: true): this switch disables no marked tier"
	}
	return nil
}

// largeTierCollector is roomflow_lucky_large_tiers{gift_id}: per gift with
// a published rule (a bounded label set), the enabled tiers marked large
// in its active versions, read from MySQL at each scrape. 0 tells the
// operator that large_tier_enabled off reaches that gift only through
// lucky.large_tier_min_reward.
type largeTierCollector struct {
	db   *sql.DB
	log  *slog.Logger
	desc *prometheus.Desc
}

func newLargeTierCollector(db *sql.DB, log *slog.Logger) *largeTierCollector {
	return &largeTierCollector{db: db, log: log, desc: prometheus.NewDesc("roomflow_lucky_large_tiers",
		"Enabled tiers marked large (large: true) in the gift's active rule versions: what large_tier_enabled off switches off.",
		[]string{"gift_id"}, nil)}
}

func (c *largeTierCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *largeTierCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rows, err := c.db.QueryContext(ctx, `SELECT r.gift_id, COALESCE(SUM(r.status = 'active' AND t.large AND t.enabled), 0)
FROM lucky_gift_rules r LEFT JOIN lucky_reward_tiers t ON t.gift_id = r.gift_id AND t.rule_version = r.rule_version
GROUP BY r.gift_id`)
	if err != nil {
		c.log.Warn("lucky large tier count failed", "error", err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var gift string
		var n int64
		if err := rows.Scan(&gift, &n); err != nil {
			c.log.Warn("lucky large tier count failed", "error", err)
			return
		}
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), gift)
	}
}
