package live_test

import (
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hyapp/roomflow/producers/loadgen/live"
	"github.com/hyapp/roomflow/producers/loadgen/report"
)

// recording is 10 s of a run at 100 events/s asked: the sink falls 50
// records (0.5 s of traffic) behind at the end; the metrics source failed
// twice.
func recording() *live.Recording {
	r := &live.Recording{Started: time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC),
		Rate: report.NewSeries("achieved events/s"), TargetRate: report.NewSeries("asked events/s"),
		Relay: report.NewSeries("relay lag"), Processor: report.NewSeries("processor lag"), Sink: report.NewSeries("sink lag"), DLQ: report.NewSeries("DLQ"),
		SourceFailures: []int{2, 0}, SourceErrors: []string{"Get http://relay:9090/metrics: refused", ""}, Ticks: 10}
	for s := 1.0; s <= 10; s++ {
		r.Rate.Add(s, 98)
		r.TargetRate.Add(s, 100)
		r.Relay.Add(s, 0.2)
		r.Processor.Add(s, 10)
		r.Sink.Add(s, 5*s)
		r.DLQ.Add(s, 1)
	}
	r.Last = live.Snapshot{Elapsed: 10 * time.Second, Counts: live.Counts{Written: 985, Target: 1000, TargetRate: 100, LateBatches: 3, LateMax: 120 * time.Millisecond},
		Rate: 98, Lag: live.Lag{Relay: gauge(0.2), Processor: gauge(10), Sink: gauge(50), DLQ: gauge(1)}}
	return r
}

func summary() live.Summary {
	return live.Summary{Notes: []string{"`roomflow loadgen --to mysql --rate 100 --duration 10s`"}, Recording: recording(),
		ByType:      map[string]int{"RoomMicChanged": 400, "RoomGiftSent": 585},
		Latency:     &live.LatencyResult{Summary: report.Summary{Count: 40, Min: 50 * time.Millisecond, P50: 120 * time.Millisecond, P99: 480 * time.Millisecond, P999: 490 * time.Millisecond, Max: 500 * time.Millisecond}, Missing: 1},
		Verify:      &live.Verify{Differences: 1, Lines: []string{"user 7 2026-12-01: seat_occupied_ms 1000 | want 2000"}},
		SourceNames: []string{"metrics", "kafka"}}
}

func TestWriteSummary(t *testing.T) {
	var b strings.Builder
	if err := live.WriteSummary(&b, summary()); err != nil {
		t.Fatal(err)
	}
	want := `wrote 985 events in 10s: 98 events/s achieved (100 asked); 3 transactions late, at most 120ms behind schedule
  RoomGiftSent                 585
  RoomMicChanged               400
commit → user_mic_event_consumption row: n=40 p50=120.0ms p99=480.0ms p999=490.0ms max=500.0ms; 1 sampled events never arrived
at the end: relay lag 0.20s, processor lag 10, sink lag 50, DLQ 1
verify: 1 differences
  user 7 2026-12-01: seat_occupied_ms 1000 | want 2000
lag metrics failed 2 of 10 ticks (shown n/a), last: Get http://relay:9090/metrics: refused
`
	if b.String() != want {
		t.Fatalf("summary:\n%s\nwant:\n%s", b.String(), want)
	}
}

// svgTexts parses an SVG file as XML and returns its element counts and
// texts.
func svgTexts(t *testing.T, path string) (map[string]int, string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d := xml.NewDecoder(f)
	n, texts := map[string]int{}, []string{}
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			return n, strings.Join(texts, "|")
		}
		if err != nil {
			t.Fatalf("%s is not XML: %v", path, err)
		}
		switch e := tok.(type) {
		case xml.StartElement:
			n[e.Name.Local]++
		case xml.CharData:
			if s := strings.TrimSpace(string(e)); s != "" {
				texts = append(texts, s)
			}
		}
	}
}

func TestWriteReport(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "run.md")
	if err := live.WriteReport(path, summary()); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"# roomflow loadgen run\n", "`roomflow loadgen --to mysql --rate 100 --duration 10s`",
		"| 985 | 98 | 100 | 3 | 120ms |", "| RoomGiftSent | 585 |",
		"![rate over time](run-rate.svg)", "| 40 | 120.0 | 480.0 | 490.0 | 500.0 | 1 |",
		"| sink | 50 records |", "![lag over time](run-lag.svg)", "Lag metrics failed 2 of 10 ticks",
		"1 differences.", `| user 7 2026-12-01: seat_occupied_ms 1000 \| want 2000 |`,
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	n, texts := svgTexts(t, filepath.Join(dir, "run-rate.svg"))
	if n["polyline"] != 3 || !strings.Contains(texts, "achieved events/s") || !strings.Contains(texts, "asked events/s") {
		t.Fatalf("rate chart: %v %s", n, texts)
	}
	// The consumers' lag in seconds of traffic at the asked rate: the
	// sink's 50 records at 100/s are 0.5 s, the axis' top.
	n, texts = svgTexts(t, filepath.Join(dir, "run-lag.svg"))
	if n["polyline"] != 4 || !strings.Contains(texts, "s of traffic|") || !strings.Contains(texts, "|0.5|") || !strings.Contains(texts, "sink lag") {
		t.Fatalf("lag chart: %v %s", n, texts)
	}

	// No lag source answered: no lag chart, the report says so.
	s := summary()
	s.Recording.Relay, s.Recording.Processor, s.Recording.Sink = report.NewSeries("r"), report.NewSeries("p"), report.NewSeries("s")
	path = filepath.Join(dir, "nolag.md")
	if err := live.WriteReport(path, s); err != nil {
		t.Fatal(err)
	}
	md, _ = os.ReadFile(path)
	if _, err := os.Stat(filepath.Join(dir, "nolag-lag.svg")); !errors.Is(err, os.ErrNotExist) || !strings.Contains(string(md), "No lag over time: nothing was sampled.") {
		t.Fatalf("empty lag chart written (%v) or not said:\n%s", err, md)
	}
	if err := live.WriteReport(filepath.Join(dir, "missing", "x.md"), summary()); err == nil {
		t.Fatal("no error writing into a missing directory")
	}
}

// TestReportChartsAreThinned: an hour sampled each second draws at most
// 300 markers per series.
func TestReportChartsAreThinned(t *testing.T) {
	s := summary()
	for x := 11.0; x <= 3600; x++ {
		s.Recording.Rate.Add(x, 100)
		s.Recording.TargetRate.Add(x, 100)
	}
	path := filepath.Join(t.TempDir(), "hour.md")
	if err := live.WriteReport(path, s); err != nil {
		t.Fatal(err)
	}
	if n, _ := svgTexts(t, strings.TrimSuffix(path, ".md")+"-rate.svg"); n["circle"] != 2*300 {
		t.Fatalf("rate chart markers: %d", n["circle"])
	}
}
