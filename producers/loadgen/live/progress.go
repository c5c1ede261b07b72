package live

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/hyapp/roomflow/producers/loadgen/report"
)

// Options configure Start.
type Options struct {
	// Counter is what the writer updates (required).
	Counter *Counter
	// Sources are asked every tick, all at once; for each value the first
	// source that knows it wins.
	Sources []LagSource
	// Interval between samples (default 1s); each source gets at most
	// this long to answer.
	Interval time.Duration
	// Out receives the progress (default os.Stdout).
	Out io.Writer
	// Terminal tells whether Out is a terminal (nil: isatty on an
	// *os.File, false for anything else).
	Terminal func(io.Writer) bool
	// Logger writes the plain lines when Out is not a terminal (nil: a
	// slog text handler on Out).
	Logger *slog.Logger
}

// Snapshot is one tick of a run.
type Snapshot struct {
	Elapsed time.Duration
	Counts
	Rate float64       // events/s over the last interval
	ETA  time.Duration // time left; -1: unknown (open-ended or nothing written yet)
	Lag
}

// Recording is the run's time series (X: seconds since Start), one point
// per tick where known: the achieved and the asked rate, the relay lag in
// seconds, the processor and sink lag in records, the DLQ count; the last
// Snapshot, and how each of Options.Sources fared.
type Recording struct {
	Started              time.Time
	Rate, TargetRate     *report.Series
	Relay                *report.Series
	Processor, Sink, DLQ *report.Series
	Last                 Snapshot
	SourceFailures       []int    // per source: ticks it failed
	SourceErrors         []string // per source: its last error, "" if none
	Ticks                int
	// Wrote is when the writers finished (Settle), since Started; 0: the
	// run ended at Stop.
	Wrote time.Duration
}

// Progress samples and renders a run; Stop ends it.
type Progress struct {
	o      Options
	rec    *Recording
	bar    *progressbar.ProgressBar // nil: plain lines
	log    *slog.Logger
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
	prev   Counts
	prevAt time.Time

	mu     sync.Mutex
	settle *settling // set by Settle
}

// settling is the state of Settle: the ticks in a row the consumers' lag
// and the DLQ count held still.
type settling struct {
	still  int
	last   Lag
	done   chan struct{}
	closed bool
}

// ErrNotSettled is Settle's error when the pipeline still lagged at its
// timeout, or no source told the consumers' lag.
var ErrNotSettled = errors.New("live: the pipeline did not settle")

// Start begins sampling every Options.Interval until Stop or ctx ends. It
// panics without a Counter (a wiring bug).
func Start(ctx context.Context, o Options) *Progress {
	if o.Counter == nil {
		panic("live: Options.Counter is nil")
	}
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.Out == nil {
		o.Out = os.Stdout
	}
	if o.Terminal == nil {
		o.Terminal = IsTerminal
	}
	now := time.Now()
	p := &Progress{o: o, done: make(chan struct{}), prevAt: now, rec: &Recording{
		Started: now, Rate: report.NewSeries("achieved events/s"), TargetRate: report.NewSeries("asked events/s"), Relay: report.NewSeries("relay lag"),
		Processor: report.NewSeries("processor lag"), Sink: report.NewSeries("sink lag"), DLQ: report.NewSeries("DLQ"),
		SourceFailures: make([]int, len(o.Sources)), SourceErrors: make([]string, len(o.Sources)),
	}}
	if o.Terminal(o.Out) {
		p.bar = newBar(o.Out, o.Counter.Counts().Target)
	} else {
		p.log = o.Logger
		if p.log == nil {
			p.log = slog.New(slog.NewTextHandler(o.Out, nil))
		}
	}
	ctx, p.cancel = context.WithCancel(ctx)
	go p.loop(ctx)
	return p
}

// IsTerminal is the default Options.Terminal: w is an *os.File on a
// terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

// barCols is what the bar line takes besides the description (percent,
// count, elapsed time) with a few columns left for the bar itself.
const barCols = 48

// fit cuts desc so the bar line fits cols columns (0: unknown, uncut): a
// line longer than the terminal wraps, and each redraw would add a line.
func fit(desc string, cols int) string {
	if cols <= 0 {
		return desc
	}
	r := []rune(desc)
	return string(r[:min(len(r), max(cols-barCols, 0))])
}

// columns is the width of the terminal w is on, 0 if unknown.
func columns(w io.Writer) int {
	f, ok := w.(*os.File)
	if !ok {
		return 0
	}
	cols, _, err := term.GetSize(int(f.Fd()))
	if err != nil {
		return 0
	}
	return cols
}

func newBar(w io.Writer, target int64) *progressbar.ProgressBar {
	if target <= 0 {
		target = -1 // a spinner: open-ended run
	}
	return progressbar.NewOptions64(target,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetWidth(24),
		progressbar.OptionShowCount(),
		progressbar.OptionSetPredictTime(false), // the description has the ETA at the asked rate
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSpinnerType(14),
		progressbar.OptionSetSpinnerChangeInterval(0), // rendered per tick, no goroutine of its own
		progressbar.OptionShowDescriptionAtLineEnd(),
	)
}

func (p *Progress) loop(ctx context.Context) {
	defer close(p.done)
	t := time.NewTicker(p.o.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.tick(ctx)
		}
	}
}

// Settle marks the writers finished and goes on sampling until the
// processors' and the sink's lag and the DLQ count held still for two
// ticks, so the Recording's last values are the run's outcome rather than
// records in flight. Still, not 0: a lag can rest at a few records (the
// sink commits its informational Kafka offsets up to its last record,
// short of the transaction marker after it). Rates after it are the
// pipeline's drain (the asked rate is no longer charted; the report's
// achieved rate is over the writing only). It fails with ErrNotSettled
// after timeout (or when no source tells the consumers' lag), or with
// ctx's error; Stop follows in any case.
func (p *Progress) Settle(ctx context.Context, timeout time.Duration) error {
	st := &settling{done: make(chan struct{})}
	p.mu.Lock()
	if p.settle == nil {
		p.settle = st
		p.rec.Wrote = time.Since(p.rec.Started)
	}
	st = p.settle
	p.mu.Unlock()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-st.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return fmt.Errorf("%w after %s", ErrNotSettled, timeout)
	}
}

// settled counts s toward Settle's condition; true once it is met.
func (st *settling) settled(s Snapshot) bool {
	quiet := (s.Processor.OK || s.Sink.OK) && s.Processor == st.last.Processor && s.Sink == st.last.Sink && s.DLQ == st.last.DLQ
	if st.last = s.Lag; quiet {
		st.still++
	} else {
		st.still = 0
	}
	return st.still >= 2
}

// Stop takes a last sample, ends the progress line and returns the
// Recording. Safe to call more than once.
func (p *Progress) Stop() *Recording {
	p.once.Do(func() {
		p.cancel()
		<-p.done
		ctx, cancel := context.WithTimeout(context.Background(), p.o.Interval)
		defer cancel()
		p.tick(ctx)
		if p.bar != nil {
			_ = p.bar.Exit()
			fmt.Fprintln(p.o.Out)
		}
	})
	return p.rec
}

// tick samples the counter and the sources, records and renders.
func (p *Progress) tick(ctx context.Context) {
	lag := p.lag(ctx)
	now := time.Now()
	c := p.o.Counter.Counts()
	p.mu.Lock()
	st := p.settle
	p.mu.Unlock()
	if st != nil {
		c.TargetRate = 0 // nothing is asked while the pipeline drains
	}
	s := Snapshot{Elapsed: now.Sub(p.rec.Started), Counts: c, Lag: lag}
	// Stop's last tick comes at any moment: over less than half an
	// interval the rate says more about the writer's batching than its pace.
	if dt := now.Sub(p.prevAt); dt >= p.o.Interval/2 {
		s.Rate = float64(c.Written-p.prev.Written) / dt.Seconds()
		p.prev, p.prevAt = c, now
	} else {
		s.Rate = p.rec.Last.Rate
	}
	s.ETA = eta(c, s.Elapsed)
	p.record(s)
	if st != nil && st.settled(s) && !st.closed {
		st.closed = true
		close(st.done)
	}
	if p.bar != nil {
		if c.Target > 0 && p.bar.GetMax64() != c.Target {
			p.bar.ChangeMax64(c.Target)
		}
		p.bar.Describe(fit(s.String(), columns(p.o.Out)))
		_ = p.bar.Set64(c.Written)
		return
	}
	p.log.LogAttrs(ctx, slog.LevelInfo, "loadgen progress", s.Attrs()...)
}

// eta is the time left at the asked rate (writers behind schedule catch
// up), or at the average so far when there is no rate asked.
func eta(c Counts, elapsed time.Duration) time.Duration {
	left, rate := c.Target-c.Written, c.TargetRate
	switch {
	case c.Target <= 0:
		return -1
	case left <= 0:
		return 0
	case rate <= 0 && c.Written > 0:
		rate = float64(c.Written) / elapsed.Seconds()
	}
	if rate <= 0 {
		return -1
	}
	return time.Duration(float64(left) / rate * float64(time.Second)).Round(time.Second)
}

func (p *Progress) record(s Snapshot) {
	x := s.Elapsed.Seconds()
	p.rec.Last = s
	p.rec.Ticks++
	p.rec.Rate.Add(x, s.Rate)
	if s.TargetRate > 0 {
		p.rec.TargetRate.Add(x, s.TargetRate)
	}
	for _, v := range []struct {
		g Gauge
		s *report.Series
	}{{s.Relay, p.rec.Relay}, {s.Processor, p.rec.Processor}, {s.Sink, p.rec.Sink}, {s.DLQ, p.rec.DLQ}} {
		if v.g.OK {
			v.s.Add(x, v.g.V)
		}
	}
}

// lag asks every source at once, each bounded by the interval, and merges
// their answers in the order of Options.Sources.
func (p *Progress) lag(ctx context.Context) Lag {
	ctx, cancel := context.WithTimeout(ctx, p.o.Interval)
	defer cancel()
	got := make([]Lag, len(p.o.Sources))
	errs := make([]error, len(p.o.Sources))
	var wg sync.WaitGroup
	for i, src := range p.o.Sources {
		wg.Go(func() { got[i], errs[i] = src.Lag(ctx) })
	}
	wg.Wait()
	var l Lag
	for i := range got {
		if errs[i] != nil {
			p.rec.SourceFailures[i]++
			p.rec.SourceErrors[i] = errs[i].Error()
			continue
		}
		l = l.or(got[i])
	}
	return l
}

// String is the progress line's text after the bar.
func (s Snapshot) String() string {
	target := ""
	if s.TargetRate > 0 {
		target = "/" + strconv.FormatFloat(s.TargetRate, 'f', 0, 64)
	}
	out := fmt.Sprintf("%.0f%s ev/s ETA %s relay %s proc %s sink %s DLQ %s", s.Rate, target, etaText(s.ETA),
		gaugeText(s.Relay, seconds), gaugeText(s.Processor, count), gaugeText(s.Sink, count), gaugeText(s.DLQ, count))
	if s.LateBatches > 0 {
		out += fmt.Sprintf(" late %d (max %s)", s.LateBatches, s.LateMax.Round(time.Millisecond))
	}
	return out
}

// Attrs are the plain line's fields (slog).
func (s Snapshot) Attrs() []slog.Attr {
	return []slog.Attr{
		slog.Int64("written", s.Written), slog.Int64("target", s.Target),
		slog.String("rate", strconv.FormatFloat(s.Rate, 'f', 0, 64)),
		slog.String("target_rate", strconv.FormatFloat(s.TargetRate, 'f', 0, 64)),
		slog.String("eta", etaText(s.ETA)),
		slog.String("relay_lag", gaugeText(s.Relay, seconds)),
		slog.String("processor_lag", gaugeText(s.Processor, count)),
		slog.String("sink_lag", gaugeText(s.Sink, count)),
		slog.String("dlq", gaugeText(s.DLQ, count)),
		slog.Int64("late_batches", s.LateBatches), slog.Duration("late_max", s.LateMax),
	}
}

func etaText(d time.Duration) string {
	if d < 0 {
		return "n/a"
	}
	return d.String()
}

func seconds(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) + "s" }
func count(v float64) string   { return strconv.FormatFloat(v, 'f', 0, 64) }

func gaugeText(g Gauge, f func(float64) string) string {
	if !g.OK {
		return "n/a"
	}
	return f(g.V)
}
