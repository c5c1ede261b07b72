package luckydraw

import "testing"

// TestPickVersion: without a named version the active rule with the latest
// effective_at_ms at or before now wins, ties going to the higher id; a
// named version must itself be active and effective.
func TestPickVersion(t *testing.T) {
	const now = 1_000
	rows := []ruleRow{
		{version: "v-future", status: "active", effectiveAt: now + 1, id: 9},
		{version: "v-old", status: "active", effectiveAt: 100, id: 1},
		{version: "v-now-high", status: "active", effectiveAt: now, id: 3},
		{version: "v-now-low", status: "active", effectiveAt: now, id: 2}, // after the higher id
		{version: "v-draft", status: "draft", effectiveAt: 500, id: 8},
	}
	for _, tc := range []struct {
		name, version, want, reject string
		rows                        []ruleRow
	}{
		{"latest effective, ties to the higher id", "", "v-now-high", "", rows},
		{"effective exactly now counts", "", "v-now-low", "", []ruleRow{rows[1], rows[3]}},
		{"later effective beats a higher id", "", "v-now-low", "", []ruleRow{rows[3], {version: "v-older-high", status: "active", effectiveAt: now - 1, id: 99}}},
		{"named and active", "v-old", "v-old", "", rows},
		{"named but not yet effective", "v-future", "", RejectRuleNotActive, rows},
		{"named but not active", "v-draft", "", RejectRuleNotActive, rows},
		{"nothing active yet", "", "", RejectNoActiveRule, rows[:1]},
	} {
		got, reject := pickVersion(tc.rows, tc.version, now)
		if got != tc.want || reject != tc.reject {
			t.Errorf("%s: pickVersion = %q, %q; want %q, %q", tc.name, got, reject, tc.want, tc.reject)
		}
	}
}
