package luckydraw

import (
	"context"
	"database/sql"
	"errors"

	"github.com/hyapp/roomflow/domain/lucky"
	"github.com/hyapp/roomflow/internal/sqlbuild"
)

// Rule versions as a draw reads them: activation rows (status,
// effective_at_ms) read in the transaction, content from the loader.

type querier interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
}

func readRuleRows(ctx context.Context, q querier, gifts []any) (map[string][]ruleRow, error) {
	return scanRuleRows(q.QueryContext(ctx, `SELECT gift_id, rule_version, status, effective_at_ms, id FROM lucky_gift_rules
WHERE gift_id IN (`+sqlbuild.List(len(gifts))+`)`, gifts...))
}

// scanRuleRows reads a query of (gift_id, rule_version, status,
// effective_at_ms, id) by gift.
func scanRuleRows(rows *sql.Rows, err error) (map[string][]ruleRow, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][]ruleRow{}
	for rows.Next() {
		var r ruleRow
		if err := rows.Scan(&r.gift, &r.version, &r.status, &r.effectiveAt, &r.id); err != nil {
			return nil, err
		}
		out[r.gift] = append(out[r.gift], r)
	}
	return out, rows.Err()
}

// resolveRule picks and loads a draw's rule version as of nowMs, or a
// reject reason. nowMs is the caller's one clock reading (a batch's
// created_at_ms), so no draw records a time before its version's
// effective_at_ms.
func (s *Service) resolveRule(ctx context.Context, rules map[string][]ruleRow, gift, version string, nowMs int64) (*lucky.Rule, string, error) {
	v, reject, _ := pickVersion(rules[gift], version, nowMs, s.cfg.ReplacedVersionGrace.Milliseconds())
	if reject != "" {
		return nil, reject, nil
	}
	r, err := s.rules.Get(ctx, gift, v)
	switch {
	case errors.Is(err, lucky.ErrInvalidRule):
		return nil, RejectRuleInvalid, nil
	case errors.Is(err, lucky.ErrUnknownRule):
		return nil, RejectRuleNotActive, nil
	case err != nil:
		return nil, "", err
	}
	if err := CheckRule(r); err != nil {
		return nil, RejectRuleInvalid, nil
	}
	return r, "", nil
}
