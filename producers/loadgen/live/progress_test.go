package live_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/producers/loadgen/live"
)

// fixedLag answers the same Lag every tick, or fails with err.
type fixedLag struct {
	lag live.Lag
	err error
}

func (f fixedLag) Lag(context.Context) (live.Lag, error) { return f.lag, f.err }

func gauge(v float64) live.Gauge { return live.Gauge{V: v, OK: true} }

// run starts a Progress on out, writes 10 events every 10 ms until at
// least want lines or bar redraws are out, and stops it.
func run(t *testing.T, out *testenv.SyncBuffer, terminal bool, target int64, want int, sources ...live.LagSource) *live.Recording {
	t.Helper()
	var c live.Counter
	c.SetTarget(target)
	c.SetRate(1000)
	p := live.Start(t.Context(), live.Options{Counter: &c, Sources: sources, Interval: 20 * time.Millisecond, Out: out,
		Terminal: func(w io.Writer) bool { return w == io.Writer(out) && terminal }})
	testenv.Eventually(t, 10*time.Second, "progress output", func() bool {
		c.Add(10)
		time.Sleep(10 * time.Millisecond)
		return strings.Count(out.String(), "ev/s")+strings.Count(out.String(), "loadgen progress") >= want
	})
	c.Late(150 * time.Millisecond)
	rec := p.Stop()
	if p.Stop() != rec {
		t.Fatal("a second Stop returned another recording")
	}
	return rec
}

// TestPlainLinesWhenNotATerminal: one slog line per tick, the failing
// source's values n/a, no terminal control characters.
func TestPlainLinesWhenNotATerminal(t *testing.T) {
	var out testenv.SyncBuffer
	rec := run(t, &out, false, 100_000, 3,
		fixedLag{err: errors.New("scrape refused")},
		fixedLag{lag: live.Lag{Relay: gauge(0.25), Processor: gauge(12)}})
	text := out.String()
	if strings.ContainsAny(text, "\r\x1b") {
		t.Fatalf("control characters in plain output: %q", text)
	}
	lines := strings.Split(strings.TrimSpace(text), "\n")
	for _, l := range lines {
		for _, want := range []string{`level=INFO msg="loadgen progress" written=`, "target=100000", "target_rate=1000", "relay_lag=0.25s",
			"processor_lag=12", "sink_lag=n/a", "dlq=n/a"} {
			if !strings.Contains(l, want) {
				t.Fatalf("line %q lacks %q", l, want)
			}
		}
	}
	if !strings.Contains(lines[len(lines)-1], "late_batches=1 late_max=150ms") {
		t.Fatalf("the last line (Stop's) does not count the late batch: %q", lines[len(lines)-1])
	}
	if rec.SourceFailures[0] != rec.Ticks || rec.SourceErrors[0] != "scrape refused" || rec.SourceFailures[1] != 0 {
		t.Fatalf("source failures %v %q of %d ticks", rec.SourceFailures, rec.SourceErrors, rec.Ticks)
	}
	if rec.Last.Written == 0 || len(rec.Rate.Points()) != rec.Ticks || len(rec.Relay.Points()) != rec.Ticks || len(rec.Sink.Points()) != 0 {
		t.Fatalf("recording: last %+v, %d ticks, rate %d points, relay %d, sink %d", rec.Last, rec.Ticks,
			len(rec.Rate.Points()), len(rec.Relay.Points()), len(rec.Sink.Points()))
	}
}

// TestProgressBarOnATerminal: the bar redraws one line (carriage returns,
// no newline until Stop) with the snapshot's text.
func TestProgressBarOnATerminal(t *testing.T) {
	var out testenv.SyncBuffer
	run(t, &out, true, 100_000, 3, fixedLag{lag: live.Lag{Relay: gauge(1.5), Sink: gauge(40), DLQ: gauge(2)}})
	text := out.String()
	if !strings.Contains(text, "\r") || strings.Count(text, "\n") != 1 || !strings.HasSuffix(text, "\n") {
		t.Fatalf("not one redrawn line: %q", text)
	}
	last := text[strings.LastIndex(text, "\r")+1:]
	for _, want := range []string{"/100000)", "/1000 ev/s", "ETA ", "relay 1.50s", "proc n/a", "sink 40", "DLQ 2", "late 1 (max 150ms)"} {
		if !strings.Contains(last, want) {
			t.Fatalf("last redraw %q lacks %q", last, want)
		}
	}
	if strings.Contains(text, "msg=") {
		t.Fatalf("log lines on a terminal: %q", text)
	}

	// Open-ended (no target): a spinner, the count and no ETA.
	var open testenv.SyncBuffer
	run(t, &open, true, 0, 3)
	text = open.String()
	last = text[strings.LastIndex(text, "\r")+1:]
	if strings.Contains(last, "%") || !strings.Contains(last, "ETA n/a") || !strings.Contains(last, "relay n/a") {
		t.Fatalf("open-ended redraw %q", last)
	}
}

func TestFit(t *testing.T) {
	desc := "998/1000 ev/s ETA 24s relay 0.12s proc 35 sink 12 DLQ 0"
	for _, tc := range []struct {
		cols int
		want string
	}{{0, desc}, {200, desc}, {48 + 13, "998/1000 ev/s"}, {30, ""}} {
		if got := live.Fit(desc, tc.cols); got != tc.want {
			t.Errorf("%d columns: %q, want %q", tc.cols, got, tc.want)
		}
	}
}

func TestIsTerminal(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if live.IsTerminal(f) || live.IsTerminal(&bytes.Buffer{}) {
		t.Fatal("a file or a buffer taken for a terminal")
	}
}

// TestSnapshotLine: the plain line's exact format, as a log reader sees it.
func TestSnapshotLine(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    live.Snapshot
		want string
	}{
		{"everything known", live.Snapshot{Counts: live.Counts{Written: 500, Target: 1000, TargetRate: 100, LateBatches: 2, LateMax: 150 * time.Millisecond},
			Rate: 99.6, ETA: 5 * time.Second, Lag: live.Lag{Relay: gauge(0.126), Processor: gauge(12), Sink: gauge(3), DLQ: gauge(0)}},
			`written=500 target=1000 rate=100 target_rate=100 eta=5s relay_lag=0.13s processor_lag=12 sink_lag=3 dlq=0 late_batches=2 late_max=150ms`},
		{"open-ended, nothing known", live.Snapshot{Counts: live.Counts{Written: 7}, ETA: -1},
			`written=7 target=0 rate=0 target_rate=0 eta=n/a relay_lag=n/a processor_lag=n/a sink_lag=n/a dlq=n/a late_batches=0 late_max=0s`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			h := slog.NewTextHandler(&b, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
				if a.Key == slog.TimeKey || a.Key == slog.LevelKey || a.Key == slog.MessageKey {
					return slog.Attr{}
				}
				return a
			}})
			slog.New(h).LogAttrs(t.Context(), slog.LevelInfo, "", tc.s.Attrs()...)
			if got := strings.TrimSpace(b.String()); got != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// drainingLag is a pipeline whose processors catch up a record a tick
// from what the test sets, the sink at 1 (the record before its
// input's transaction marker), and whose DLQ count the test sets.
type drainingLag struct{ proc, dlq atomic.Int64 }

func (d *drainingLag) Lag(context.Context) (live.Lag, error) {
	p := d.proc.Load()
	next := max(p-1, 0)
	if !d.proc.CompareAndSwap(p, next) {
		next = d.proc.Load() // the test set it meanwhile
	}
	return live.Lag{Processor: gauge(float64(next)), Sink: gauge(1), DLQ: gauge(float64(d.dlq.Load()))}, nil
}

// TestSettle: after the writers, sampling goes on until the consumers'
// lag and the DLQ hold still; the achieved rate is over the writing.
func TestSettle(t *testing.T) {
	var c live.Counter
	c.SetRate(1000)
	src := &drainingLag{}
	src.proc.Store(1_000_000)
	var out testenv.SyncBuffer
	p := live.Start(t.Context(), live.Options{Counter: &c, Sources: []live.LagSource{src}, Interval: 20 * time.Millisecond, Out: &out,
		Terminal: func(io.Writer) bool { return false }})
	c.Add(500)
	time.Sleep(100 * time.Millisecond)
	if err := p.Settle(t.Context(), 150*time.Millisecond); !errors.Is(err, live.ErrNotSettled) {
		t.Fatalf("settled with the processors catching up: %v", err)
	}
	go func() {
		src.dlq.Store(3)
		time.Sleep(100 * time.Millisecond)
		src.proc.Store(2)
	}()
	if err := p.Settle(t.Context(), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // ticks of the drain: no asked rate charted
	rec := p.Stop()
	if rec.Wrote < 100*time.Millisecond || rec.Wrote > rec.Last.Elapsed-200*time.Millisecond || rec.Last.DLQ != gauge(3) || rec.Last.Processor != gauge(0) {
		t.Fatalf("wrote %s of %s, last %+v", rec.Wrote, rec.Last.Elapsed, rec.Last)
	}
	if last, _ := rec.TargetRate.Last(); last.X > rec.Wrote.Seconds() {
		t.Fatalf("asked rate charted at %.2fs, after the writing ended at %s", last.X, rec.Wrote)
	}
	if !strings.Contains(out.String(), "target_rate=0") {
		t.Fatalf("no drain lines:\n%s", out.String())
	}
	var b strings.Builder
	if err := live.WriteSummary(&b, live.Summary{Recording: rec}); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("wrote 500 events in %s: %.0f events/s achieved (1000 asked)\n", rec.Wrote.Round(time.Millisecond), 500/rec.Wrote.Seconds()); !strings.HasPrefix(b.String(), want) {
		t.Fatalf("summary %q, want it to start %q", b.String(), want)
	}

	// No source tells the consumers' lag: nothing to settle on.
	q := live.Start(t.Context(), live.Options{Counter: &c, Interval: 20 * time.Millisecond, Out: io.Discard, Terminal: func(io.Writer) bool { return false }})
	defer q.Stop()
	if err := q.Settle(t.Context(), 200*time.Millisecond); !errors.Is(err, live.ErrNotSettled) {
		t.Fatalf("settled without a lag source: %v", err)
	}
}
