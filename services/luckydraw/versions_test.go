package luckydraw

import (
	"slices"
	"strings"
	"testing"
)

// TestPickVersion: the version with the greatest (effective_at_ms, id)
// among the effective non-drafts decides; paused or retired, it stops the
// gift (no fallback); a named older version draws only within the grace of
// its successor and only while active.
func TestPickVersion(t *testing.T) {
	const now, grace = 100_000, 10_000
	row := func(v, status string, eff, id int64) ruleRow {
		return ruleRow{gift: "g", version: v, status: status, effectiveAt: eff, id: id}
	}
	old := row("v1", "active", 1_000, 1)
	for _, tc := range []struct {
		name                      string
		rows                      []ruleRow
		version                   string
		draws, reject, decidingIs string
	}{
		{"latest effective decides", []ruleRow{old, row("v2", "active", 50_000, 2)}, "", "v2", "", "v2"},
		{"ties on effective_at go to the higher id", []ruleRow{row("lo", "active", now, 5), row("hi", "active", now, 6)}, "", "hi", "", "hi"},
		{"later effective beats a higher id", []ruleRow{row("a", "active", now, 1), row("b", "active", now-1, 99)}, "", "a", "", "a"},
		{"a future version does not decide yet", []ruleRow{old, row("v2", "active", now+1, 2)}, "", "v1", "", "v1"},
		{"a draft never decides", []ruleRow{old, row("v2", "draft", 50_000, 2)}, "", "v1", "", "v1"},
		{"paused deciding version stops the gift: no fallback", []ruleRow{old, row("v2", "paused", 50_000, 2)}, "", "", RejectNoActiveRule, "v2"},
		{"retired deciding version stops the gift", []ruleRow{old, row("v2", "retired", 50_000, 2)}, "", "", RejectNoActiveRule, "v2"},
		{"named deciding version", []ruleRow{old, row("v2", "active", 50_000, 2)}, "v2", "v2", "", "v2"},
		{"named older version within its successor's grace", []ruleRow{old, row("v2", "active", now-grace+1, 2)}, "v1", "v1", "", "v2"},
		{"named older version once the grace is over", []ruleRow{old, row("v2", "active", now-grace, 2)}, "v1", "", RejectRuleNotActive, "v2"},
		{"named older version paused within the grace", []ruleRow{row("v1", "paused", 1_000, 1), row("v2", "active", now-1, 2)}, "v1", "", RejectRuleNotActive, "v2"},
		{"named older version while the deciding one is paused", []ruleRow{old, row("v2", "paused", now-1, 2)}, "v1", "", RejectRuleNotActive, "v2"},
		{"grace counts from its own successor", []ruleRow{old, row("v2", "active", 2_000, 2), row("v3", "active", now-1, 3)}, "v1", "", RejectRuleNotActive, "v3"},
		{"named version not yet effective", []ruleRow{old, row("v2", "active", now+1, 2)}, "v2", "", RejectRuleNotActive, "v1"},
		{"named draft", []ruleRow{old, row("v2", "draft", 5, 2)}, "v2", "", RejectRuleNotActive, "v1"},
		{"unknown gift", nil, "", "", RejectNoActiveRule, ""},
		{"unknown named version", []ruleRow{old}, "v9", "", RejectRuleNotActive, "v1"},
	} {
		draws, reject, deciding := pickVersion(tc.rows, tc.version, now, grace)
		if draws != tc.draws || reject != tc.reject || deciding != tc.decidingIs {
			t.Errorf("%s: pickVersion = %q, %q, %q; want %q, %q, %q", tc.name, draws, reject, deciding, tc.draws, tc.reject, tc.decidingIs)
		}
	}
}

func TestExplainAndStaleVersions(t *testing.T) {
	const now, grace = 100_000, 10_000
	rows := []ruleRow{
		{gift: "g", version: "v1", status: "active", effectiveAt: 1_000, id: 1},
		{gift: "g", version: "v2", status: "paused", effectiveAt: 2_000, id: 2},
		{gift: "g", version: "v3", status: "active", effectiveAt: now - 5_000, id: 3},
		{gift: "g", version: "v4", status: "active", effectiveAt: now - 1_000, id: 4},
		{gift: "g", version: "v5", status: "active", effectiveAt: now + 1_000, id: 5},
		{gift: "g", version: "v6", status: "draft", effectiveAt: 500, id: 6},
	}
	got := explainVersions(rows, now, grace)
	var order []string
	for _, s := range got {
		order = append(order, s.Version)
	}
	if want := []string{"v5", "v4", "v3", "v2", "v1", "v6"}; !slices.Equal(order, want) {
		t.Fatalf("order %v, want %v", order, want)
	}
	for _, tc := range []struct {
		i                int
		draws, scheduled bool
		why              string
	}{
		{0, false, true, "scheduled"},
		{1, true, false, ""},
		{2, false, false, "requests naming it draw until"},
		{3, false, false, "replaced by v3"},
		{4, false, false, "replaced by v2"},
		{5, false, false, "draft"},
	} {
		s := got[tc.i]
		if s.Draws != tc.draws || s.Scheduled != tc.scheduled || !strings.Contains(s.Why, tc.why) || (tc.why == "" && s.Why != "") {
			t.Errorf("%s: %+v, want draws %v scheduled %v why ~%q", s.Version, s, tc.draws, tc.scheduled, tc.why)
		}
	}
	if strings.Contains(got[3].Why, "draw until") {
		t.Errorf("a paused replaced version has no grace: %q", got[3].Why)
	}
	// v1 and v2 are past their successors' grace; v3 is in v4's.
	if s := staleVersions(rows, now, grace); !slices.Equal(s, []string{"v1", "v2"}) {
		t.Errorf("stale %v, want [v1 v2]", s)
	}
	if s := staleVersions(rows, now, 0); !slices.Equal(s, []string{"v1", "v2", "v3"}) {
		t.Errorf("stale without grace %v, want [v1 v2 v3]", s)
	}
	stopped := explainVersions([]ruleRow{rows[0], {gift: "g", version: "v9", status: "retired", effectiveAt: now - 1, id: 9}}, now, grace)
	if !strings.Contains(stopped[0].Why, "gift is stopped") || strings.Contains(stopped[1].Why, "draw until") {
		t.Errorf("retired deciding version: %+v", stopped)
	}
}
