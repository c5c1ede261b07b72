package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/hyapp/roomflow/benchmarks/internal/benchparse"
)

// minChange is the smallest change of the median the comparison flags:
// below it a difference is too small to matter even when it is real.
const minChange = 0.05

// A row is one measure of one stage with the rounds of each side.
type row struct {
	bench string
	m     benchparse.Measure // its identity and direction; Value unused
	a, b  []float64
}

// median is the middle value, or the mean of the two middle values.
func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// A verdict is what the comparison says of one row.
type verdict int

const (
	unchanged verdict = iota
	better
	worse
	tooFew // a side has no round of this measure
)

func (v verdict) String() string {
	return [...]string{"", "**B better**", "**B worse**", "not on both sides"}[v]
}

// judge flags a row only when the two sides do not overlap at all (every
// B round beyond every A round, ties are overlap) and the median moved by
// at least minChange. Non-overlap alone happens by chance with the
// probability falseFlagChance gives; the threshold keeps a tiny, real but
// irrelevant shift out of the flags.
func judge(r row) verdict {
	if len(r.a) == 0 || len(r.b) == 0 {
		return tooFew
	}
	ratio := median(r.b) / median(r.a)
	if math.IsNaN(ratio) || math.Abs(ratio-1) < minChange {
		return unchanged
	}
	up := slices.Min(r.b) > slices.Max(r.a)
	down := slices.Max(r.b) < slices.Min(r.a)
	switch {
	case !up && !down:
		return unchanged
	case up != r.m.LowerIsBetter:
		return better
	default:
		return worse
	}
}

// falseFlagChance is the chance that a measure B does not change is
// flagged: with na and nb rounds of exchangeable values (no real change,
// no ties), each of the C(na+nb, na) orders of the pooled rounds is
// equally likely, and two of them separate the sides (all B above, or all
// below). The 5% threshold only lowers it, so this is an upper bound.
func falseFlagChance(na, nb int) float64 {
	c := 1.0 // C(na+nb, na), built up term by term to stay exact in float64
	for i := 1; i <= na; i++ {
		c = c * float64(nb+i) / float64(i)
	}
	return 2 / c
}

// num prints a figure with the precision its size needs.
func num(v float64) string {
	switch a := math.Abs(v); {
	case math.IsNaN(v):
		return "-"
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

func spread(v []float64) string {
	if len(v) == 0 {
		return "-"
	}
	return fmt.Sprintf("%s (%s–%s)", num(median(v)), num(slices.Min(v)), num(slices.Max(v)))
}

// writeTable prints the Markdown table of the rows and, under it, the
// chance of a false flag at the rounds each side had.
func writeTable(w io.Writer, rows []row) {
	fmt.Fprintln(w, "| benchmark | stage | measure | A median (min–max) | B median (min–max) | B/A | flag |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | ---: | --- |")
	flagged, measured := 0, 0
	rounds := map[[2]int]int{}
	for _, r := range rows {
		unit := r.m.Unit
		if unit != "" {
			unit = ", " + unit
		}
		dir := "higher is better"
		if r.m.LowerIsBetter {
			dir = "lower is better"
		}
		v := judge(r)
		ratio := "-"
		if v != tooFew {
			ratio = fmt.Sprintf("%.3f", median(r.b)/median(r.a))
			measured++
			rounds[[2]int{len(r.a), len(r.b)}]++
		}
		if v == better || v == worse {
			flagged++
		}
		fmt.Fprintf(w, "| %s | %s | %s%s (%s) | %s | %s | %s | %s |\n", r.bench, r.m.Stage, r.m.Name, unit, dir, spread(r.a), spread(r.b), ratio, v)
	}
	fmt.Fprintf(w, "\n%d of %d measures flagged: every B round beyond every A round and the medians %.0f%% or more apart.\n", flagged, measured, 100*minChange)
	keys := make([][2]int, 0, len(rounds))
	for k := range rounds {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y [2]int) int { return rounds[y] - rounds[x] })
	var parts []string
	expected := 0.0
	for _, k := range keys {
		p := falseFlagChance(k[0], k[1])
		expected += p * float64(rounds[k])
		parts = append(parts, fmt.Sprintf("%.2g%% for a measure with %d A and %d B rounds (%d measures)", 100*p, k[0], k[1], rounds[k]))
	}
	if len(parts) > 0 {
		fmt.Fprintf(w, "Chance that a measure B does not change is flagged anyway: at most %s; about %.2g of the %d measures are flagged by chance alone on average (a \"(ref.)\" stage is a reference beside roomflow's path, such as a raw copy: a flag there says the machine or the benchmark itself changed between the sides).\n",
			strings.Join(parts, "; "), expected, measured)
	}
}
