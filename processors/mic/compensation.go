package mic

import (
	"cmp"
	"slices"
)

// Candidate is an open session with the wall-clock time after which a
// timer close is due (Policy.DueAtMs).
type Candidate struct {
	Key     string // SessionID.Key()
	DueAtMs int64
}

// SelectDue picks the sessions due at nowMs (DueAtMs < nowMs), the longest
// overdue first (ties by key, so the choice is deterministic), at most
// limit of them (limit < 0: all). It reorders cands.
func SelectDue(cands []Candidate, nowMs int64, limit int) []Candidate {
	due := cands[:0]
	for _, c := range cands {
		if c.DueAtMs < nowMs {
			due = append(due, c)
		}
	}
	slices.SortFunc(due, func(a, b Candidate) int {
		if c := cmp.Compare(a.DueAtMs, b.DueAtMs); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	if limit >= 0 && len(due) > limit {
		due = due[:limit]
	}
	return due
}
