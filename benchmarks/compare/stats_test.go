package main

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/hyapp/roomflow/benchmarks/internal/benchparse"
)

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{16820, 19588, 14000, 17000, 16000}, 16820},
	} {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// The rounds below are recorded figures: the sink's entries/s of three
// rounds on the machine of 2026-12-02 (A) and made-up B sides around them.
func TestJudge(t *testing.T) {
	tput := benchparse.Measure{Name: "throughput"}
	lat := benchparse.Measure{Name: "p99", LowerIsBetter: true}
	a := []float64{16820, 15300, 17800}
	for _, tc := range []struct {
		name string
		m    benchparse.Measure
		a, b []float64
		want verdict
	}{
		{"every B above, 20% up", tput, a, []float64{20500, 21000, 19900}, better},
		{"every B below, throughput down", tput, a, []float64{12000, 13100, 11500}, worse},
		{"lower latency is better", lat, []float64{73, 80, 75}, []float64{50, 52, 55}, better},
		{"higher latency is worse", lat, []float64{73, 80, 75}, []float64{90, 95, 120}, worse},
		{"overlap by one round", tput, a, []float64{20500, 21000, 17000}, unchanged},
		{"a tie is overlap", tput, a, []float64{17800, 21000, 22000}, unchanged},
		{"apart but under 5%", tput, []float64{100, 101, 102}, []float64{103, 104, 105}, unchanged},
		{"apart and exactly 5%", tput, []float64{99, 100, 100}, []float64{105, 105, 106}, better},
		{"the median ratio decides the 5%, not the extremes", tput, []float64{90, 100, 101}, []float64{102, 103, 104}, unchanged},
		{"no B round", tput, a, nil, tooFew},
		{"no A round", tput, nil, a, tooFew},
		{"even rounds", tput, []float64{10, 11}, []float64{12, 13}, better},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := judge(row{m: tc.m, a: tc.a, b: tc.b}); got != tc.want {
				t.Fatalf("judge = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestFalseFlagChance(t *testing.T) {
	for _, tc := range []struct {
		na, nb int
		want   float64
	}{
		{2, 2, 2.0 / 6},   // C(4,2) = 6
		{3, 3, 2.0 / 20},  // C(6,3) = 20
		{4, 4, 2.0 / 70},  // C(8,4) = 70
		{5, 5, 2.0 / 252}, // C(10,5) = 252
		{3, 2, 2.0 / 10},  // a failed round on one side: C(5,3) = 10
		{2, 3, 2.0 / 10},
	} {
		if got := falseFlagChance(tc.na, tc.nb); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("falseFlagChance(%d, %d) = %v, want %v", tc.na, tc.nb, got, tc.want)
		}
	}
}

// Brute force: over every order of 3+3 distinct values, the share that
// judge flags (with a change above the threshold) is the formula's.
func TestFalseFlagChanceByEnumeration(t *testing.T) {
	vals := []float64{100, 200, 300, 400, 500, 600}
	flagged, total := 0, 0
	for mask := range 1 << 6 {
		var a, b []float64
		for i, v := range vals {
			if mask&(1<<i) != 0 {
				a = append(a, v)
			} else {
				b = append(b, v)
			}
		}
		if len(a) != 3 {
			continue
		}
		total++
		if v := judge(row{m: benchparse.Measure{Name: "throughput"}, a: a, b: b}); v == better || v == worse {
			flagged++
		}
	}
	if got, want := float64(flagged)/float64(total), falseFlagChance(3, 3); got != want {
		t.Fatalf("%d of %d splits flagged (%v), formula %v", flagged, total, got, want)
	}
}

func TestWriteTable(t *testing.T) {
	var w bytes.Buffer
	writeTable(&w, []row{
		{bench: "sink", m: benchparse.Measure{Stage: "sink", Name: "throughput", Unit: "entries/s"},
			a: []float64{16820, 15300, 17800}, b: []float64{12000, 13100, 11500}},
		{bench: "lucky", m: benchparse.Measure{Stage: "lucky hot service", Name: "latency p99", Unit: "ms", LowerIsBetter: true},
			a: []float64{73.1, 80.2, 75}, b: []float64{70, 79, 81.5}},
		{bench: "im", m: benchparse.Measure{Stage: "IM, saturated", Name: "throughput", Unit: "calls/s"}, a: []float64{200, 200, 200}},
	})
	for _, want := range []string{
		"| sink | sink | throughput, entries/s (higher is better) | 16820 (15300–17800) | 12000 (11500–13100) | 0.713 | **B worse** |",
		"| lucky | lucky hot service | latency p99, ms (lower is better) | 75.0 (73.1–80.2) | 79.0 (70.0–81.5) | 1.053 |  |",
		"| im | IM, saturated | throughput, calls/s (higher is better) | 200 (200–200) | - | - | not on both sides |",
		"1 of 2 measures flagged",
		"at most 10% for a measure with 3 A and 3 B rounds (2 measures)",
		"about 0.2 of the 2 measures",
	} {
		if !strings.Contains(w.String(), want) {
			t.Errorf("no %q in\n%s", want, w.String())
		}
	}
}
