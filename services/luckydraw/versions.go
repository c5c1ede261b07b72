package luckydraw

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hyapp/roomflow/domain/lucky"
	"github.com/hyapp/roomflow/schemas/envelope"
)

// Which version of a gift draws (issue 31): among its versions with
// effective_at_ms <= now and a status other than draft, the one with the
// greatest (effective_at_ms, id) decides. If it is active it draws; if it
// is paused or retired the gift is stopped: there is no fallback to an
// older version, so pausing a version always stops its gift. A request
// naming an older version still draws while the version that replaced it
// became effective less than the grace ago (a routine publish rejects
// nothing in flight), unless that older version is itself paused or
// retired. Everything here is pure: the callers read the rows.

// ruleRow is a lucky_gift_rules row's activation state.
type ruleRow struct {
	gift, version, status string
	effectiveAt, id       int64
}

// after orders versions by (effective_at_ms, id).
func (r *ruleRow) after(o *ruleRow) bool {
	return r.effectiveAt > o.effectiveAt || r.effectiveAt == o.effectiveAt && r.id > o.id
}

// effectiveRows are rows' versions that can decide at nowMs (not draft,
// effective), oldest first.
func effectiveRows(rows []ruleRow, nowMs int64) []*ruleRow {
	var out []*ruleRow
	for i := range rows {
		if r := &rows[i]; r.status != "draft" && r.effectiveAt <= nowMs {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b *ruleRow) int {
		switch {
		case a.after(b):
			return 1
		case b.after(a):
			return -1
		}
		return 0
	})
	return out
}

// pickVersion applies the activation rule to a gift's versions for a
// request naming version ("" = the deciding one) at nowMs with the
// replaced-version grace graceMs. It returns the version that draws or a
// reject reason (no_active_rule without a named version, rule_not_active
// with one), and the deciding version ("" when none).
func pickVersion(rows []ruleRow, version string, nowMs, graceMs int64) (draws, reject, deciding string) {
	eff := effectiveRows(rows, nowMs)
	reject = RejectNoActiveRule
	if version != "" {
		reject = RejectRuleNotActive
	}
	if len(eff) == 0 {
		return "", reject, ""
	}
	d := eff[len(eff)-1]
	if d.status != "active" {
		return "", reject, d.version
	}
	if version == "" || version == d.version {
		return d.version, "", d.version
	}
	for i, r := range eff[:len(eff)-1] {
		if r.version == version && r.status == "active" && nowMs-eff[i+1].effectiveAt < graceMs {
			return version, "", d.version
		}
	}
	return "", reject, d.version
}

// VersionState is one rule version as `roomflow lucky rules show` reports
// it: whether it draws now and, when not, why.
type VersionState struct {
	GiftID, Version, Status string
	EffectiveAtMs           int64
	// Draws: the deciding version, active (requests without a version
	// draw it).
	Draws bool
	// Scheduled: not yet effective, not a draft.
	Scheduled bool
	// Why says why a version does not draw (or, in the grace, until when
	// requests naming it still do).
	Why string
}

// explainVersions describes every version of one gift at nowMs, the
// newest (effective_at_ms, id) first.
func explainVersions(rows []ruleRow, nowMs, graceMs int64) []VersionState {
	eff := effectiveRows(rows, nowMs)
	pos := map[*ruleRow]int{}
	for i, r := range eff {
		pos[r] = i
	}
	sorted := make([]*ruleRow, len(rows))
	for i := range rows {
		sorted[i] = &rows[i]
	}
	slices.SortFunc(sorted, func(a, b *ruleRow) int {
		switch {
		case a.after(b):
			return -1
		case b.after(a):
			return 1
		}
		return 0
	})
	var out []VersionState
	for _, r := range sorted {
		s := VersionState{GiftID: r.gift, Version: r.version, Status: r.status, EffectiveAtMs: r.effectiveAt}
		i, effective := pos[r]
		switch {
		case r.status == "draft":
			s.Why = "draft: never draws until its status is set"
		case !effective:
			s.Scheduled = true
			s.Why = "scheduled: effective at " + msTime(r.effectiveAt)
		case i == len(eff)-1 && r.status == "active":
			s.Draws = true
		case i == len(eff)-1:
			s.Why = r.status + " and deciding: the gift is stopped (no older version draws instead)"
		default:
			next := eff[i+1]
			s.Why = fmt.Sprintf("replaced by %s (effective %s)", next.version, msTime(next.effectiveAt))
			if until := next.effectiveAt + graceMs; r.status == "active" && nowMs < until && eff[len(eff)-1].status == "active" {
				s.Why += "; requests naming it draw until " + msTime(until)
			}
		}
		out = append(out, s)
	}
	return out
}

// staleVersions are a gift's versions whose status no longer draws and
// should read retired: older than the deciding version, and paused (an
// older paused version never draws again) or past the grace of the
// version that replaced it. Drafts and scheduled versions are left alone.
func staleVersions(rows []ruleRow, nowMs, graceMs int64) []string {
	eff := effectiveRows(rows, nowMs)
	var out []string
	for i := 0; i+1 < len(eff); i++ {
		if r := eff[i]; r.status == "paused" || r.status == "active" && nowMs-eff[i+1].effectiveAt >= graceMs {
			out = append(out, r.version)
		}
	}
	return out
}

func msTime(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano) }

// maxRuleID is the width of lucky_gift_rules' and lucky_reward_tiers' id
// columns (gift_id, rule_version, tier_id).
const maxRuleID = 64

// CheckNewRule is `rules publish`'s check: CheckRule, and ids that fit
// their 64-byte columns and end in no space. The rule tables pad trailing
// spaces (and ignore case), so "v1 " shares a key with "v1", and a gift id
// ending in one is refused by every draw. Errors wrap ErrRuleInvalid and
// name the field. Draws check stored versions with CheckRule alone.
func CheckNewRule(r *lucky.Rule) error {
	if err := CheckRule(r); err != nil {
		return err
	}
	ids := [][2]string{{"gift_id", r.GiftID}, {"rule_version", r.RuleVersion}}
	for _, t := range r.Tiers {
		ids = append(ids, [2]string{"tiers[" + t.TierID + "].tier_id", t.TierID})
	}
	var errs []error
	for _, id := range ids {
		if len(id[1]) > maxRuleID || envelope.CheckID(id[0], id[1]) != nil {
			errs = append(errs, &lucky.RuleError{GiftID: r.GiftID, RuleVersion: r.RuleVersion, Field: id[0],
				Msg: fmt.Sprintf("%q: at most %d bytes, not ending in a space", id[1], maxRuleID)})
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrRuleInvalid, errors.Join(errs...))
	}
	return nil
}
