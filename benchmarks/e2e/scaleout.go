package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hyapp/roomflow/benchmarks/internal/rfproc"
	"github.com/hyapp/roomflow/producers/loadgen"
	"github.com/hyapp/roomflow/producers/loadgen/report"
)

// scaleOut runs the deployment shape of deploy/kubernetes on one machine:
// a relay leader and a standby, three replicas each of process, sink and
// publish-im (static members, --instance-id), traffic at rate for d. A
// third of the way in, a fourth process and sink replica join; two thirds
// in, one of each is stopped with SIGTERM. Reported: the longest pause of
// the mic processor's output (UserMicSessionClosed records) and of the
// sink's commits (consumption rows' batch times) around each change, the
// time until every stage's lag is back to at most 1 s of traffic, and the
// facts in MySQL against the oracle of the rows written. On 2 cores this
// shows correctness and pause lengths, not throughput per replica.
func (b *bench) scaleOut(ctx context.Context, rate float64, d time.Duration) error {
	c := b.env.Config
	b.seq++
	events := b.events(int(rate * d.Seconds()))
	res := &result{config: "scale-out", rate: rate, cpu: map[string]time.Duration{}, lag: map[string]*report.Series{}}
	live := map[string]*rfproc.Child{}
	defer func() {
		for _, ch := range live {
			_ = ch.Stop(15 * time.Second)
		}
	}()
	start := func(comp, id string) error {
		ch, err := b.env.Runner.Start(rfproc.Spec{Command: comp, ID: id, InstanceID: true, Config: &c})
		if err == nil {
			live[id] = ch
		}
		return err
	}
	for _, comp := range []string{"relay", "process", "sink", "publish-im"} {
		n := 3
		if comp == "relay" {
			n = 2 // a leader and a standby
		}
		for i := range n {
			if err := start(comp, fmt.Sprintf("%s-%c", comp, 'a'+i)); err != nil {
				return err
			}
		}
	}
	rt, err := b.begin(ctx, c, events)
	if err != nil {
		return err
	}
	defer rt.stop()
	tl, closedAt, ids, warm := rt.rooms, rt.closed, rt.ids, rt.warm
	if err := b.waitConsumed(ctx, events[:warm], 2*time.Minute); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	fmt.Printf("\nscale-out: relay-a, relay-b (standby), process/sink/publish-im -a -b -c, %.0f events/s for %s\n", rate, d)

	third := d.Seconds() / 3
	type change struct {
		at   float64 // seconds since the start
		what string
		done bool
	}
	changes := []*change{{at: third, what: "process-d and sink-d join"}, {at: 2 * third, what: "process-b and sink-b stopped (SIGTERM)"}}
	var wallAt []time.Time
	t0 := time.Now()
	commits, err := b.drive(ctx, c, res, tl, events[warm:], ids[warm:], rate, func(x float64) error {
		for i, ch := range changes {
			if ch.done || x < ch.at {
				continue
			}
			ch.done = true
			wallAt = append(wallAt, time.Now())
			fmt.Printf("  at %5.1fs: %s\n", x, ch.what)
			if i == 0 {
				if err := start("process", "process-d"); err != nil {
					return err
				}
				return start("sink", "sink-d")
			}
			for _, id := range []string{"process-b", "sink-b"} {
				live[id].Signal(syscall.SIGTERM)
				delete(live, id)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	_ = commits
	if err := tl.Await(ctx, ids, time.Minute); err != nil {
		return err
	}
	if err := b.waitConsumed(ctx, events, 2*time.Minute); err != nil {
		return err
	}
	drained := time.Now()

	// Pauses: the longest gap between consecutive outputs within 30 s
	// after each change (traffic flows all along, so a gap is the stage
	// standing still), next to the longest gap before the first change.
	var sinkTimes []time.Time
	prefix := strings.SplitN(ids[0], "-", 2)[0] + "-%"
	rows, err := b.env.DB.QueryContext(ctx, "SELECT DISTINCT updated_at_ms FROM user_mic_event_consumption WHERE app_code = ? AND event_id LIKE ? ORDER BY updated_at_ms",
		c.AppCode, prefix)
	if err != nil {
		return err
	}
	for rows.Next() {
		var ms int64
		if err := rows.Scan(&ms); err != nil {
			rows.Close()
			return err
		}
		sinkTimes = append(sinkTimes, time.UnixMilli(ms))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	closedTimes := closedAt.Times()
	fmt.Printf("  %-44s %12s %12s %16s\n", "", "mic output", "sink commits", "lag back <= 1 s")
	fmt.Printf("  %-44s %11.2fs %11.2fs\n", "longest pause before any change (baseline)",
		maxGap(closedTimes, t0.Add(5*time.Second), wallAt[0]).Seconds(), maxGap(sinkTimes, t0.Add(5*time.Second), wallAt[0]).Seconds())
	for i, w := range wallAt {
		end := w.Add(30 * time.Second)
		if i+1 < len(wallAt) && wallAt[i+1].Before(end) {
			end = wallAt[i+1]
		}
		end = minTime(end, drained)
		rec := recovery(res.lag, w.Sub(t0).Seconds(), end.Sub(t0).Seconds())
		fmt.Printf("  %-44s %11.2fs %11.2fs %16s\n", "after: "+changes[i].what, maxGap(closedTimes, w, end).Seconds(), maxGap(sinkTimes, w, end).Seconds(), rec)
	}

	values := make([][]byte, len(events))
	for i, e := range events {
		values[i] = e.Payload
	}
	rule := loadgen.DefaultScenario().Rule
	oracle := loadgen.BuildOracle(values, map[loadgen.RuleKey]loadgen.LuckyRule{{GiftID: rule.GiftID, RuleVersion: rule.RuleVersion}: rule}, c.AppCode)
	rep, err := loadgen.Compare(ctx, b.env.DB, c.AppCode, oracle)
	if err != nil {
		return err
	}
	if !rep.OK() {
		for _, d := range rep.Diffs[:min(5, len(rep.Diffs))] {
			fmt.Println("  diff:", d)
		}
		return fmt.Errorf("scale-out: %d facts differ from the oracle", len(rep.Diffs))
	}
	fmt.Printf("  facts equal the oracle: %d lifetime, %d daily, %d session and %d pool rows compared (%d users with open sessions skipped)\n",
		rep.LifetimeRows, rep.DailyRows, rep.SessionRows, rep.PoolRows, rep.SkippedUsers)
	if b.o.out != "" {
		var series []*report.Series
		for _, s := range []string{"relay", "room processor", "mic processor", "sink"} {
			series = append(series, res.lag[s])
		}
		if err := os.MkdirAll(b.o.out, 0o755); err != nil {
			return err
		}
		return report.WriteSVGFile(filepath.Join(b.o.out, "e2e-scaleout-lag.svg"), report.LineChart{
			Title:  fmt.Sprintf("scale-out at %.0f events/s: +1 process/sink at %.0fs, -1 at %.0fs", rate, third, 2*third),
			XLabel: "s", YLabel: "lag, s of traffic", Series: series})
	}
	return nil
}

// maxGap is the longest time between consecutive instants of ts (sorted)
// inside [from, to], counting from from and to to.
func maxGap(ts []time.Time, from, to time.Time) time.Duration {
	prev, gap := from, time.Duration(0)
	for _, t := range ts {
		if t.Before(from) {
			continue
		}
		if t.After(to) {
			break
		}
		gap = max(gap, t.Sub(prev))
		prev = t
	}
	return max(gap, to.Sub(prev))
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// recovery is how long after from (seconds since the start) every stage's
// lag was back to at most 1 s of traffic, once it had peaked, looking up to
// to; "never above 1 s" when no stage went above.
func recovery(lag map[string]*report.Series, from, to float64) string {
	peakAt, peak := from, 0.0
	for _, s := range lag {
		for _, p := range s.Points() {
			if p.X >= from && p.X <= to && p.Y > peak {
				peak, peakAt = p.Y, p.X
			}
		}
	}
	if peak <= 1 {
		return "never above 1 s"
	}
	for x := peakAt; x <= to; x++ {
		ok := true
		for _, s := range lag {
			for _, p := range s.Points() {
				if p.X >= x && p.X < x+1 && p.Y > 1 {
					ok = false
				}
			}
		}
		if ok {
			return fmt.Sprintf("%.0f s (peak %.1f s)", x-from, peak)
		}
	}
	return fmt.Sprintf("not within %.0f s (peak %.1f s)", to-from, peak)
}
