package live

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hyapp/roomflow/producers/loadgen/report"
)

// Summary is what a run reports at its end.
type Summary struct {
	// Title heads the Markdown report (default "roomflow loadgen run").
	Title string
	// Notes describe the run (command line, mode, scenario), one a line.
	Notes []string
	// Recording is Progress.Stop's (required).
	Recording *Recording
	// ByType counts the events written by event type.
	ByType map[string]int
	// Latency is the commit → fact latency; nil: not measured.
	Latency *LatencyResult
	// Verify is `roomflow verify`'s outcome; nil: not verified.
	Verify *Verify
	// SourceNames name Options.Sources in the report (default "source N").
	SourceNames []string
}

// Verify is the outcome of comparing the facts with the oracle.
type Verify struct {
	Differences int
	Lines       []string // the differences as verify prints them
}

// wrote is how long the writers ran: until Settle, else the whole run.
func (s Summary) wrote() time.Duration {
	return cmp.Or(s.Recording.Wrote, s.Recording.Last.Elapsed)
}

// asked is the last rate asked while writing (0 during Settle's drain).
func (s Summary) asked() float64 {
	if p, ok := s.Recording.TargetRate.Last(); ok {
		return p.Y
	}
	return s.Recording.Last.TargetRate
}

// achieved is the events/s over the writing.
func (s Summary) achieved() float64 {
	if el := s.wrote().Seconds(); el > 0 {
		return float64(s.Recording.Last.Written) / el
	}
	return 0
}

func (s Summary) sourceName(i int) string {
	if i < len(s.SourceNames) && s.SourceNames[i] != "" {
		return s.SourceNames[i]
	}
	return fmt.Sprintf("source %d", i+1)
}

func (s Summary) types() []string { return slices.Sorted(maps.Keys(s.ByType)) }

func ms(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond)) }

// WriteSummary writes the terminal summary: events by type, the achieved
// rate, the latency percentiles, the lag at the end, verify's
// differences, and the lag sources that failed. It fails only if w does.
func WriteSummary(w io.Writer, s Summary) error {
	var b strings.Builder
	last := s.Recording.Last
	fmt.Fprintf(&b, "wrote %d events in %s: %.0f events/s achieved", last.Written, s.wrote().Round(time.Millisecond), s.achieved())
	if asked := s.asked(); asked > 0 {
		fmt.Fprintf(&b, " (%.0f asked)", asked)
	}
	if last.LateBatches > 0 {
		fmt.Fprintf(&b, "; %d transactions late, at most %s behind schedule", last.LateBatches, last.LateMax.Round(time.Millisecond))
	}
	b.WriteString("\n")
	for _, t := range s.types() {
		fmt.Fprintf(&b, "  %-28s %d\n", t, s.ByType[t])
	}
	if l := s.Latency; l != nil {
		fmt.Fprintf(&b, "commit → user_mic_event_consumption row: %s", l.Summary)
		if l.Missing > 0 {
			fmt.Fprintf(&b, "; %d sampled events never arrived", l.Missing)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "at the end: relay lag %s, processor lag %s, sink lag %s, DLQ %s\n",
		gaugeText(last.Relay, seconds), gaugeText(last.Processor, count), gaugeText(last.Sink, count), gaugeText(last.DLQ, count))
	if v := s.Verify; v != nil {
		fmt.Fprintf(&b, "verify: %d differences\n", v.Differences)
		for _, l := range v.Lines {
			fmt.Fprintf(&b, "  %s\n", l)
		}
	}
	for i, n := range s.Recording.SourceFailures {
		if n > 0 {
			fmt.Fprintf(&b, "lag %s failed %d of %d ticks (shown n/a), last: %s\n", s.sourceName(i), n, s.Recording.Ticks, s.Recording.SourceErrors[i])
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteReport writes path (Markdown: the summary as tables) and next to
// it, linked from it, the charts PATH-rate.svg (achieved and asked rate
// over time) and PATH-lag.svg (each stage's lag over time, in seconds of
// traffic), PATH being path without its extension. A chart with no point
// (no lag source answered) is left out and the report says so. It fails
// if a file cannot be written.
func WriteReport(path string, s Summary) error {
	base := strings.TrimSuffix(path, filepath.Ext(path))
	rateSVG, lagSVG := base+"-rate.svg", base+"-lag.svg"
	last := s.Recording.Last
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n", cmp.Or(s.Title, "roomflow loadgen run"))
	for _, n := range s.Notes {
		fmt.Fprintf(&b, "%s  \n", n)
	}
	fmt.Fprintf(&b, "Started %s, wrote for %s", s.Recording.Started.UTC().Format(time.RFC3339), s.wrote().Round(time.Millisecond))
	if s.Recording.Wrote > 0 {
		fmt.Fprintf(&b, ", sampled until %s (the pipeline draining)", last.Elapsed.Round(time.Millisecond))
	}
	b.WriteString(".\n\n")

	b.WriteString("## Throughput\n\n| events written | achieved events/s | asked events/s | late transactions | latest behind schedule |\n| --- | --- | --- | --- | --- |\n")
	asked := "as fast as possible"
	if a := s.asked(); a > 0 {
		asked = fmt.Sprintf("%.0f", a)
	}
	fmt.Fprintf(&b, "| %d | %.0f | %s | %d | %s |\n\n", last.Written, s.achieved(), asked, last.LateBatches, last.LateMax.Round(time.Millisecond))
	if len(s.ByType) > 0 {
		b.WriteString("| event type | events |\n| --- | --- |\n")
		for _, t := range s.types() {
			fmt.Fprintf(&b, "| %s | %d |\n", t, s.ByType[t])
		}
		b.WriteString("\n")
	}
	if err := chart(&b, rateSVG, "rate over time", report.LineChart{Title: "events/s over time", XLabel: "s", YLabel: "events/s",
		Series: []*report.Series{s.Recording.Rate.Thin(chartPoints), s.Recording.TargetRate.Thin(chartPoints)}}); err != nil {
		return err
	}

	if l := s.Latency; l != nil {
		b.WriteString("## Latency, commit → user_mic_event_consumption row\n\n| sampled | p50 ms | p99 ms | p999 ms | max ms | never arrived |\n| --- | --- | --- | --- | --- | --- |\n")
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %d |\n\n", l.Count, ms(l.P50), ms(l.P99), ms(l.P999), ms(l.Max), l.Missing)
	}

	b.WriteString("## Lag\n\n| stage | at the end |\n| --- | --- |\n")
	fmt.Fprintf(&b, "| relay | %s |\n| processors | %s records |\n| sink | %s records |\n| DLQ | %s records |\n\n",
		gaugeText(last.Relay, seconds), gaugeText(last.Processor, count), gaugeText(last.Sink, count), gaugeText(last.DLQ, count))
	if err := chart(&b, lagSVG, "lag over time", s.lagChart()); err != nil {
		return err
	}
	for i, n := range s.Recording.SourceFailures {
		if n > 0 {
			fmt.Fprintf(&b, "Lag %s failed %d of %d ticks (n/a there); last error: `%s`\n\n", s.sourceName(i), n, s.Recording.Ticks, s.Recording.SourceErrors[i])
		}
	}

	if v := s.Verify; v != nil {
		fmt.Fprintf(&b, "## Verify\n\n%d differences.\n", v.Differences)
		if len(v.Lines) > 0 {
			b.WriteString("\n| difference |\n| --- |\n")
			for _, l := range v.Lines {
				fmt.Fprintf(&b, "| %s |\n", strings.ReplaceAll(l, "|", `\|`))
			}
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// lagChart puts every stage's lag in seconds: the relay's as measured, the
// consumers' records divided by the asked rate at that time (the achieved
// average without one), as benchmarks/e2e charts it.
func (s Summary) lagChart() report.LineChart {
	r := s.Recording
	asked := map[float64]float64{}
	for _, p := range r.TargetRate.Points() {
		asked[p.X] = p.Y
	}
	inSeconds := func(src *report.Series, name string) *report.Series {
		out := report.NewSeries(name)
		for _, p := range src.Points() {
			if rate := cmp.Or(asked[p.X], s.achieved()); rate > 0 {
				out.Add(p.X, p.Y/rate)
			}
		}
		return out
	}
	return report.LineChart{Title: "lag over time", XLabel: "s", YLabel: "s of traffic", Series: []*report.Series{
		r.Relay.Thin(chartPoints), inSeconds(r.Processor, "processor lag").Thin(chartPoints), inSeconds(r.Sink, "sink lag").Thin(chartPoints)}}
}

// chartPoints bounds the points a chart draws per series.
const chartPoints = 300

// chart writes c to path and links it from b; an empty chart is only
// mentioned.
func chart(b *strings.Builder, path, alt string, c report.LineChart) error {
	err := report.WriteSVGFile(path, c)
	if errors.Is(err, report.ErrEmptyChart) {
		fmt.Fprintf(b, "No %s: nothing was sampled.\n\n", alt)
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(b, "![%s](%s)\n\n", alt, filepath.Base(path))
	return nil
}
