package luckydraw

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/hyapp/roomflow/processors/lucky"
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
// with each tier's enabled as the draw transaction reads it now: the
// loader caches versions for good, and enabled is the one column an
// operator changes after publishing. One plain read per batch, after the
// fence, of the batch's distinct versions.
func (b *batchTx) withLiveTiers(ctx context.Context, rules []*lucky.Rule) ([]*lucky.Rule, error) {
	type key struct{ gift, version string }
	live := map[key]*lucky.Rule{}
	var cond []string
	var args []any
	for _, r := range rules {
		k := key{r.GiftID, r.RuleVersion}
		if _, ok := live[k]; !ok {
			live[k] = nil
			cond = append(cond, "(gift_id = ? AND rule_version = ?)")
			args = append(args, k.gift, k.version)
		}
	}
	rows, err := b.tx.QueryContext(ctx, `SELECT gift_id, rule_version, tier_id, enabled FROM lucky_reward_tiers WHERE `+
		strings.Join(cond, " OR "), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	enabled := map[key]map[string]bool{}
	for rows.Next() {
		var k key
		var tier string
		var on bool
		if err := rows.Scan(&k.gift, &k.version, &tier, &on); err != nil {
			return nil, err
		}
		if enabled[k] == nil {
			enabled[k] = map[string]bool{}
		}
		enabled[k][tier] = on
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out := make([]*lucky.Rule, len(rules))
	for i, r := range rules {
		k := key{r.GiftID, r.RuleVersion}
		if live[k] == nil {
			c := *r
			c.Tiers = slices.Clone(r.Tiers)
			for j, t := range c.Tiers {
				if on, ok := enabled[k][t.TierID]; ok {
					c.Tiers[j].Enabled = on
				}
			}
			live[k] = &c
		}
		out[i] = live[k]
	}
	return out, nil
}
