package report_test

import (
	"encoding/xml"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hyapp/roomflow/producers/loadgen/report"
)

// TestQuantiles: nearest-rank percentiles of 1..1000 ms in random order,
// added from several goroutines.
func TestQuantiles(t *testing.T) {
	var s report.Samples
	if got := s.Summary(); got != (report.Summary{}) || s.Quantile(0.99) != 0 {
		t.Fatalf("empty samples: %+v", got)
	}
	perm := rand.New(rand.NewPCG(1, 2)).Perm(1000)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for _, v := range perm[g*250 : (g+1)*250] {
				s.Add(time.Duration(v+1) * time.Millisecond)
			}
		})
	}
	wg.Wait()
	want := report.Summary{Count: 1000, Min: time.Millisecond, P50: 500 * time.Millisecond, P99: 990 * time.Millisecond,
		P999: 999 * time.Millisecond, Max: 1000 * time.Millisecond}
	if got := s.Summary(); got != want {
		t.Fatalf("summary %+v, want %+v", got, want)
	}
	if got := s.Summary().String(); got != "n=1000 p50=500.0ms p99=990.0ms p999=999.0ms max=1000.0ms" {
		t.Fatalf("String %q", got)
	}
	// Samples keep coming after a percentile was read.
	s.Add(-time.Second) // a clock step: counted as 0
	if s.Len() != 1001 || s.Quantile(0.0001) != 0 || s.Quantile(1) != time.Second {
		t.Fatalf("after more samples: len %d min %s max %s", s.Len(), s.Quantile(0.0001), s.Quantile(1))
	}
}

func TestSeriesDropsWhatCannotBeDrawn(t *testing.T) {
	s := report.NewSeries("lag")
	s.Add(0, 1)
	s.Add(1, math.NaN())
	s.Add(math.Inf(1), 2)
	s.Add(2, 3)
	if p := s.Points(); len(p) != 2 || p[1] != (report.Point{X: 2, Y: 3}) {
		t.Fatalf("points %v", p)
	}
	if last, ok := s.Last(); !ok || last.Y != 3 {
		t.Fatalf("last %v %v", last, ok)
	}
}

func TestThin(t *testing.T) {
	s := report.NewSeries("rate")
	for i := range 10 {
		s.Add(float64(i), float64(10*i))
	}
	if s.Thin(10) != s || s.Thin(0) != s {
		t.Fatal("a series within the bound was copied")
	}
	th := s.Thin(4) // runs of 3: 0-2, 3-5, 6-8, 9
	want := []report.Point{{X: 1, Y: 10}, {X: 4, Y: 40}, {X: 7, Y: 70}, {X: 9, Y: 90}}
	if got := th.Points(); th.Name != "rate" || !slices.Equal(got, want) {
		t.Fatalf("thinned %v, want %v", got, want)
	}
}

// svgDoc parses an SVG and counts its elements by name, so a test can
// check what was drawn (and that it is well-formed XML).
func svgDoc(t *testing.T, doc string) (map[string]int, []string) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(doc))
	n, texts, in := map[string]int{}, []string{}, ""
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			return n, texts
		}
		if err != nil {
			t.Fatalf("not XML: %v\n%s", err, doc)
		}
		switch e := tok.(type) {
		case xml.StartElement:
			n[e.Name.Local]++
			in = e.Name.Local
		case xml.CharData:
			if in == "text" && strings.TrimSpace(string(e)) != "" {
				texts = append(texts, string(e))
			}
		case xml.EndElement:
			in = ""
		}
	}
}

func TestLineChart(t *testing.T) {
	p99, p50 := report.NewSeries("p99 <insert→MySQL>"), report.NewSeries("p50")
	for _, r := range []float64{1000, 5000, 10000} {
		p99.Add(r, r/40)
		p50.Add(r, r/100)
	}
	doc, err := report.SVG(report.LineChart{Title: "latency vs rate", XLabel: "events/s", YLabel: "ms", Series: []*report.Series{p99, p50}})
	if err != nil {
		t.Fatal(err)
	}
	n, texts := svgDoc(t, doc)
	if n["svg"] != 1 || n["polyline"] != 3 || n["circle"] != 6 { // axes frame + two lines
		t.Fatalf("elements %v", n)
	}
	joined := strings.Join(texts, "|")
	for _, want := range []string{"latency vs rate", "p99 <insert→MySQL>", "10k", "250", "events/s"} {
		if !strings.Contains(joined, want) {
			t.Errorf("no text %q in %s", want, joined)
		}
	}
	if _, err := report.SVG(report.LineChart{Series: []*report.Series{report.NewSeries("x")}}); !errors.Is(err, report.ErrEmptyChart) {
		t.Fatalf("empty chart: %v", err)
	}
}

func TestBarChart(t *testing.T) {
	c := report.BarChart{Title: "throughput per stage", YLabel: "events/s", Groups: []string{"relay", "mic", "sink"},
		Series: []report.BarSeries{{Name: "measured", Values: []float64{20000, 9000, 30000}}, {Name: "limit", Values: []float64{40000, 25000, 31000}}}}
	doc, err := report.SVG(c)
	if err != nil {
		t.Fatal(err)
	}
	n, texts := svgDoc(t, doc)
	if n["rect"] != 1+6+2 { // background, bars, legend keys
		t.Fatalf("elements %v", n)
	}
	if !strings.Contains(strings.Join(texts, "|"), "40k") {
		t.Fatalf("y axis does not reach the highest bar: %v", texts)
	}
	c.Series[1].Values = c.Series[1].Values[:2]
	if _, err := report.SVG(c); err == nil || !strings.Contains(err.Error(), `"limit"`) {
		t.Fatalf("mismatched series: %v", err)
	}
}
