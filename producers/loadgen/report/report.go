// Package report is the measuring side of a load run: latency samples with
// their percentiles (Samples), time series (Series), and charts of both as
// self-contained SVG (LineChart, BarChart) that a Markdown report or
// docs/performance.md can show. benchmarks/e2e and producers/loadgen/live
// (`roomflow loadgen`'s live view and --report) use it, so a user's own run
// and the project's benchmark report the same numbers the same way.
//
// Nothing here talks to Kafka or MySQL: the caller measures, this package
// records and renders.
package report

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
)

// Samples collects durations (latencies) and answers exact percentiles.
// Safe for concurrent use. It keeps every sample (8 bytes each): a run of
// a few million events fits easily; a longer one should sample.
type Samples struct {
	mu     sync.Mutex
	d      []time.Duration
	sorted bool
}

// Add records one sample. A negative duration (clocks of two hosts) is
// recorded as 0.
func (s *Samples) Add(d time.Duration) {
	s.mu.Lock()
	s.d = append(s.d, max(d, 0))
	s.sorted = false
	s.mu.Unlock()
}

// Len is the number of samples.
func (s *Samples) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.d)
}

// Quantile is the nearest-rank q-quantile (0 < q <= 1; q=0.99 is p99): the
// smallest sample with at least q of all samples at or below it. 0 without
// samples.
func (s *Samples) Quantile(q float64) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.quantile(q)
}

func (s *Samples) quantile(q float64) time.Duration {
	if len(s.d) == 0 {
		return 0
	}
	if !s.sorted {
		slices.Sort(s.d)
		s.sorted = true
	}
	rank := int(math.Ceil(q * float64(len(s.d))))
	return s.d[min(max(rank, 1), len(s.d))-1]
}

// Summary is the usual digest of Samples.
type Summary struct {
	Count               int
	Min, P50, P99, P999 time.Duration
	Max                 time.Duration
}

// Summary returns the count, min, p50, p99, p999 and max.
func (s *Samples) Summary() Summary {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.d) == 0 {
		return Summary{}
	}
	return Summary{Count: len(s.d), Min: s.quantile(0), P50: s.quantile(0.5), P99: s.quantile(0.99),
		P999: s.quantile(0.999), Max: s.quantile(1)}
}

// String is the summary in milliseconds, for logs and text reports.
func (m Summary) String() string {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return fmt.Sprintf("n=%d p50=%.1fms p99=%.1fms p999=%.1fms max=%.1fms", m.Count, ms(m.P50), ms(m.P99), ms(m.P999), ms(m.Max))
}

// Point is one point of a Series.
type Point struct{ X, Y float64 }

// Series is a named sequence of points: a metric over time (X in seconds
// since the run started), or a percentile over rates. Safe for concurrent
// Add.
type Series struct {
	Name string
	mu   sync.Mutex
	pts  []Point
}

// NewSeries returns an empty series called name (the chart's legend).
func NewSeries(name string) *Series { return &Series{Name: name} }

// Add appends a point; NaN and infinite values are dropped (a chart cannot
// place them).
func (s *Series) Add(x, y float64) {
	if !finite(x) || !finite(y) {
		return
	}
	s.mu.Lock()
	s.pts = append(s.pts, Point{x, y})
	s.mu.Unlock()
}

// Points is a copy of the points in the order added.
func (s *Series) Points() []Point {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.pts)
}

// Last is the last point added, false for an empty series.
func (s *Series) Last() (Point, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pts) == 0 {
		return Point{}, false
	}
	return s.pts[len(s.pts)-1], true
}

// Thin is the series in at most n points for a chart: consecutive points
// averaged in equal runs (a 30-minute run sampled each second draws 1800
// markers otherwise). A series of n points or fewer is returned as is.
func (s *Series) Thin(n int) *Series {
	pts := s.Points()
	if n <= 0 || len(pts) <= n {
		return s
	}
	out := NewSeries(s.Name)
	per := (len(pts) + n - 1) / n
	for i := 0; i < len(pts); i += per {
		run := pts[i:min(i+per, len(pts))]
		var x, y float64
		for _, p := range run {
			x, y = x+p.X, y+p.Y
		}
		out.Add(x/float64(len(run)), y/float64(len(run)))
	}
	return out
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
