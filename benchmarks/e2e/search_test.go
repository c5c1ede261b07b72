package main

import (
	"fmt"
	"testing"
)

func TestSearch(t *testing.T) {
	rates := []float64{5, 10, 15, 20}
	for _, tc := range []struct {
		from     float64
		verdicts []bool
		probes   string
		best     float64
	}{
		{0, []bool{true, true, false}, "[5 10 15]", 10},
		{0, []bool{false}, "[5]", 0},
		{0, []bool{true, true, true, true}, "[5 10 15 20]", 20},
		{10, []bool{true, true, false}, "[10 15 20]", 15},
		{10, []bool{false, true}, "[10 5]", 5},
		{15, []bool{false, false, true}, "[15 10 5]", 5},
		{10, []bool{false, false}, "[10 5]", 0},
		{7, []bool{true, false}, "[5 10]", 5}, // not a listed rate: from the lowest
	} {
		s := newSearch(rates, tc.from)
		var probes []float64
		for rate, ok := s.next(); ok; rate, ok = s.next() {
			if len(probes) == len(tc.verdicts) {
				t.Fatalf("from %v: probes %v and more, verdicts %v", tc.from, probes, tc.verdicts)
			}
			s.record(tc.verdicts[len(probes)])
			probes = append(probes, rate)
		}
		if fmt.Sprint(probes) != tc.probes || s.best != tc.best {
			t.Errorf("from %v, verdicts %v: probes %v best %v, want %s best %v", tc.from, tc.verdicts, probes, s.best, tc.probes, tc.best)
		}
	}
}
