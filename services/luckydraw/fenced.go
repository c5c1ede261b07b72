package luckydraw

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/hyapp/roomflow/internal/sqlbuild"
)

// fencedStateQuery is the first statement of every draw transaction: the
// fence's shared lock (lucky_fence, see 0009_lucky_operations.sql), then,
// in the same round trip, plain reads of the app's switches, the rule
// versions of the batch's gifts and the tier enabled flags of their
// active versions (only an active version draws). MariaDB runs a UNION's
// parts in order and takes the transaction's snapshot at its first plain
// read, after the fence's lock is granted; every operator change updates
// the fence row before it writes, so nothing these reads see can change
// until the batch commits. One statement instead of four: the fence
// costs no round trip. %s are the gift lists.
const fencedStateQuery = `(SELECT 'fence' AS part, '' AS s1, '' AS s2, '' AS s3, version AS n1, 0 AS n2 FROM lucky_fence
WHERE id = 1 LOCK IN SHARE MODE)
UNION ALL (SELECT 'switch', name, scope_id, '', enabled, 0 FROM lucky_switches WHERE app_code = ?)
UNION ALL (SELECT 'rule', gift_id, rule_version, status, effective_at_ms, id FROM lucky_gift_rules WHERE gift_id IN (%s))
UNION ALL (SELECT 'tier', t.gift_id, t.rule_version, t.tier_id, t.enabled, 0 FROM lucky_gift_rules r
JOIN lucky_reward_tiers t ON t.gift_id = r.gift_id AND t.rule_version = r.rule_version
WHERE r.gift_id IN (%s) AND r.status = 'active')`

// tierVersion names a rule version whose tiers' enabled flags a batch
// read.
type tierVersion struct{ gift, version string }

// readFenced waits at the fence and reads, as of then, the app's
// switches (b.sw), the tier enabled flags of the active versions of the
// batch's gifts (b.tiers, for withLiveTiers) and those gifts' versions,
// which it returns by gift (for resolveRule).
func (b *batchTx) readFenced(ctx context.Context, reqs []*drawReq) (map[string][]ruleRow, error) {
	args := []any{b.app}
	var gifts []any
	seen := map[string]bool{}
	for _, r := range reqs {
		if !seen[r.giftID] {
			seen[r.giftID] = true
			gifts = append(gifts, r.giftID)
		}
	}
	list := sqlbuild.List(len(gifts))
	args = append(append(args, gifts...), gifts...)
	rows, err := b.tx.QueryContext(ctx, fmt.Sprintf(fencedStateQuery, list, list), args...)
	if err != nil {
		return nil, err
	}
	fenced := false
	b.sw = b.s.sw.newView()
	b.tiers = map[tierVersion]map[string]bool{}
	rules := map[string][]ruleRow{}
	err = eachRow(rows, func(rows *sql.Rows) error {
		var part, s1, s2, s3 string
		var n1, n2 int64
		if err := rows.Scan(&part, &s1, &s2, &s3, &n1, &n2); err != nil {
			return err
		}
		switch part {
		case "fence":
			fenced = true
		case "switch":
			b.sw.add(b.s.sw.defaults, s1, s2, n1 != 0)
		case "rule":
			rules[s1] = append(rules[s1], ruleRow{gift: s1, version: s2, status: s3, effectiveAt: n1, id: n2})
		case "tier":
			k := tierVersion{s1, s2}
			if b.tiers[k] == nil {
				b.tiers[k] = map[string]bool{}
			}
			b.tiers[k][s3] = n1 != 0
		}
		return nil
	})
	if err == nil && !fenced {
		err = errors.New("luckydraw: lucky_fence has no row: run roomflow migrate")
	}
	return rules, err
}
