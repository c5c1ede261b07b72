package luckyctl

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/hyapp/roomflow/producers/loadgen/report"
	"github.com/hyapp/roomflow/services/luckydraw/simulate"
)

// Chart file names of WriteSimReport, beside report.md.
const (
	SimRateChart    = "payout-rate.svg"
	SimBalanceChart = "pool-balances.svg"
)

// WriteSimSummary prints a simulation's result r as Markdown tables: the rates, the payout
// distributions, how often a floor or cap removed a tier, and the pools.
// bandPPM (lucky.publish_payout_band_ppm) is shown beside the targets.
func WriteSimSummary(w io.Writer, r *simulate.Result, bandPPM int64) {
	fmt.Fprintf(w, "%d draws over %gh: spend %d, payout %d coins\n\n", r.Draws, r.Hours, r.Spend, r.Payout)
	fmt.Fprintln(w, "| gift | rule | analytic payout ppm (unfiltered) | target ppm | simulated ppm | draws |")
	fmt.Fprintln(w, "| --- | --- | ---: | ---: | ---: | ---: |")
	for _, g := range r.Gifts {
		an := fmt.Sprintf("%.0f", g.AnalyticPPM)
		if g.AnalyticErr != "" {
			an = "none (fixed tier, gift_price 0)"
		}
		sim := "-"
		if g.Spend > 0 {
			sim = fmt.Sprintf("%.0f", float64(g.Payout)*1e6/float64(g.Spend))
		}
		fmt.Fprintf(w, "| %s | %s | %s | %d ± %d | %s | %d |\n", g.GiftID, g.RuleVersion, an, g.TargetPPM, bandPPM, sim, g.Draws)
	}
	fmt.Fprintf(w, "\n- simulated payout rate: **%.0f ppm**, 95%% interval %.0f–%.0f\n", r.RatePPM, r.CILowPPM, r.CIHighPPM)
	fmt.Fprintf(w, "- hit frequency: %.4f (%d of %d draws)\n", share(r.Hits, r.Draws), r.Hits, r.Draws)
	fmt.Fprintf(w, "- a floor or cap removed a tier in %.4f of draws (floor %.4f, cap %.4f)\n",
		share(r.RemovedDraws, r.Draws), share(r.FloorDraws, r.Draws), share(r.CapDraws, r.Draws))
	fmt.Fprintln(w, "\n| payout (coins) | windows | p50 | p99 | max |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: |")
	fmt.Fprintf(w, "| per user-day | %d | %d | %d | %d |\n", r.UserDay.N, r.UserDay.P50, r.UserDay.P99, r.UserDay.Max)
	fmt.Fprintf(w, "| per room-hour | %d | %d | %d | %d |\n", r.RoomHour.N, r.RoomHour.P50, r.RoomHour.P99, r.RoomHour.Max)
	fmt.Fprintln(w, "\n| pool | start | end | lowest | reserve_floor | a floor first removed a tier | largest drawdown |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, p := range r.Pools {
		at := "never"
		if p.ReachedFloor {
			at = fmt.Sprintf("%.2fh", p.FloorAtHours)
		}
		fmt.Fprintf(w, "| %s %s | %d | %d | %d | %d | %s | %d |\n", p.ScopeType, p.ScopeID, p.Start, p.End, p.Low, p.ReserveFloor, at, p.Drawdown)
	}
	fmt.Fprintf(w, "\n%d rooms had a tier removed by a floor; largest room drawdown %d (%s)\n", r.RoomsAtFloor, r.MaxRoomDrawdown, r.RoomMax)
}

func share(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// WriteSimReport writes dir/report.md (title, the summary, the charts) and
// its two charts through producers/loadgen/report: the payout rate over
// time against each gift's target band, and the pools' balances.
func WriteSimReport(dir, title string, r *simulate.Result, bandPPM int64) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	rate := report.LineChart{Title: "Payout rate per time bucket", XLabel: "hours", YLabel: "payout ppm of spend",
		Series: chartSeries(r.RateSeries)}
	for _, g := range r.Gifts {
		for _, l := range []struct {
			name string
			v    int64
		}{{"target", g.TargetPPM}, {"target-band", g.TargetPPM - bandPPM}, {"target+band", g.TargetPPM + bandPPM}} {
			if bandPPM == 0 && l.name != "target" {
				continue
			}
			s := report.NewSeries(g.GiftID + " " + l.name)
			s.Add(0, float64(max(l.v, 0)))
			s.Add(r.Hours, float64(max(l.v, 0)))
			rate.Series = append(rate.Series, s)
		}
	}
	bal := report.LineChart{Title: "Pool balances", XLabel: "hours", YLabel: "coins", Series: chartSeries(r.BalanceSeries)}
	if err := report.WriteSVGFile(filepath.Join(dir, SimRateChart), rate); err != nil {
		return fmt.Errorf("simulate report: %s: %w", SimRateChart, err)
	}
	if err := report.WriteSVGFile(filepath.Join(dir, SimBalanceChart), bal); err != nil {
		return fmt.Errorf("simulate report: %s: %w", SimBalanceChart, err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n", title)
	WriteSimSummary(&b, r, bandPPM)
	fmt.Fprintf(&b, "\n![payout rate over time](%s)\n\n![pool balances over time](%s)\n", SimRateChart, SimBalanceChart)
	if math.IsNaN(r.CILowPPM) {
		b.WriteString("\nToo few draws for an interval.\n")
	}
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(b.String()), 0o644)
}

// chartSeries are a simulation's series as the charts take them.
func chartSeries(ss []simulate.Series) []*report.Series {
	var out []*report.Series
	for _, s := range ss {
		c := report.NewSeries(s.Name)
		for i := range s.X {
			c.Add(s.X[i], s.Y[i])
		}
		out = append(out, c)
	}
	return out
}
