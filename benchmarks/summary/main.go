// Command summary reads the outputs of one `make bench` run
// (benchmarks/results/<benchmark>-<stamp>.txt, every repetition appended)
// and writes, for the run's Markdown page, each stage's throughput as
// min / median / max over its runs next to its reference from the same
// runs, and a bar chart of each stage's share of its reference (SVG, via
// producers/loadgen/report).
//
//	go run ./benchmarks/summary -dir benchmarks/results -stamp 20261201T203000Z -svg benchmarks/results/stages-20261201T203000Z.svg
//
// References: relay, room and mic processors and the sink against their
// raw equivalents; publish-im at saturation against Tencent's app limit;
// the lucky hot path against its 2,000 draws/s target; the fact path's
// highest sustained rate against the raw MySQL limit of the same e2e run.
// A benchmark whose output is missing or has no run is listed as such.
package main

import (
	"cmp"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hyapp/roomflow/benchmarks/internal/benchparse"
	"github.com/hyapp/roomflow/producers/loadgen/report"
)

func main() {
	dir := flag.String("dir", "benchmarks/results", "directory of the outputs")
	stamp := flag.String("stamp", "", "the run's stamp (files <benchmark>-<stamp>.txt)")
	svg := flag.String("svg", "", "write the bar chart here (empty: none)")
	flag.Parse()
	if *stamp == "" {
		fmt.Fprintln(os.Stderr, "summary: -stamp is required")
		os.Exit(2)
	}
	var stages []benchparse.Stage
	var missing []string
	for _, b := range benchparse.Order {
		out, err := os.ReadFile(filepath.Join(*dir, b+"-"+*stamp+".txt"))
		if err != nil {
			missing = append(missing, b)
			continue
		}
		st, _ := benchparse.Stages(b, string(out))
		stages = append(stages, st...)
	}
	if err := write(os.Stdout, stages, missing, *svg); err != nil {
		fmt.Fprintln(os.Stderr, "summary:", err)
		os.Exit(1)
	}
}

// write prints the Markdown table and writes the chart to svg (relative
// links in the table's page name it by its base name).
func write(w io.Writer, stages []benchparse.Stage, missing []string, svg string) error {
	fmt.Fprintf(w, "| stage | unit | runs | min / median / max | reference | reference, median | share of the reference, min / median / max |\n| --- | --- | --- | --- | --- | --- | --- |\n")
	chart := report.BarChart{Title: "throughput per stage, share of its reference in the same run", YLabel: "% of the reference", Width: 960}
	lo, md, hi := report.BarSeries{Name: "min"}, report.BarSeries{Name: "median"}, report.BarSeries{Name: "max"}
	for _, s := range stages {
		if len(s.Runs) == 0 {
			fmt.Fprintf(w, "| %s | %s | 0 | %s | %s | | |\n", s.Name, s.Unit, cmp.Or(s.None, "not measured in this run"), s.Ref)
			continue
		}
		var vals, refs, shares []float64
		for _, r := range s.Runs {
			vals, refs, shares = append(vals, r.Value), append(refs, r.Ref), append(shares, 100*r.Value/r.Ref)
		}
		v0, v1, v2 := spread(vals)
		_, r1, _ := spread(refs)
		s0, s1, s2 := spread(shares)
		fmt.Fprintf(w, "| %s | %s | %d | %.0f / %.0f / %.0f | %s | %.0f | %.0f%% / %.0f%% / %.0f%% |\n", s.Name, s.Unit, len(s.Runs), v0, v1, v2, s.Ref, r1, s0, s1, s2)
		chart.Groups = append(chart.Groups, s.Name)
		lo.Values, md.Values, hi.Values = append(lo.Values, s0), append(md.Values, s1), append(hi.Values, s2)
	}
	if len(missing) > 0 {
		fmt.Fprintf(w, "\nNo output in this run: %s.\n", strings.Join(missing, ", "))
	}
	if svg == "" || len(chart.Groups) == 0 {
		return nil
	}
	chart.Series = []report.BarSeries{lo, md, hi}
	if err := report.WriteSVGFile(svg, chart); err != nil {
		return err
	}
	fmt.Fprintf(w, "\n![throughput per stage vs its reference](%s)\n", filepath.Base(svg))
	return nil
}

// spread is the min, median and max of v (the lower middle for an even
// count).
func spread(v []float64) (lo, med, hi float64) {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[0], s[(len(s)-1)/2], s[len(s)-1]
}
