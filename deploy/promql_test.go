package deploy

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/hyapp/roomflow/cmd/roomflow/command"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/producers/loadgen"
	"github.com/hyapp/roomflow/tools/demo"
)

// emitted is what a running roomflow exports: every metric family of the
// registry the whole pipeline (relay, process, sink, publish-im, as
// `roomflow run`) and `roomflow lucky` with its fake wallet registered
// on, gathered after a short demo run converged. The alert rules and the
// dashboard may only name what is in it.
type emitted map[string]*dto.MetricFamily

var (
	emittedOnce sync.Once
	emittedRun  emitted
	emittedErr  error
	emittedLog  bytes.Buffer
)

// pipelineMetrics runs the pipeline once per test binary (the demo of
// TestPipelineEndToEnd, smaller) and returns what it emitted.
func pipelineMetrics(t *testing.T) emitted {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: runs the whole pipeline on kfake and MariaDB")
	}
	emittedOnce.Do(func() {
		sc := loadgen.DefaultScenario()
		sc.Sessions, sc.Gifts, sc.Users, sc.Rooms = 60, 60, 20, 6
		sc.EventIDPrefix = testenv.UniqueName(t)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		base := command.DemoOptions()
		res, err := demo.Run(ctx, demo.Options{
			Scenario: sc, ServerDSN: testenv.ServerDSN(), Database: testenv.UniqueName(t),
			Timeout: 90 * time.Second, LogLevel: "error", Out: &emittedLog, Specs: base.Specs, Check: base.Check,
		})
		if err != nil {
			emittedErr = err
			return
		}
		emittedRun = emitted{}
		for _, mf := range res.Metrics {
			emittedRun[mf.GetName()] = mf
		}
	})
	if emittedErr != nil {
		t.Fatalf("pipeline run: %v\n%s", emittedErr, emittedLog.String())
	}
	return emittedRun
}

// family resolves a series name to its family: a histogram's or summary's
// _bucket, _sum and _count series belong to the family without the suffix
// (and only _bucket has le).
func (e emitted) family(name string) (mf *dto.MetricFamily, extra []string) {
	if mf := e[name]; mf != nil {
		return mf, nil
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suf)
		if !ok {
			continue
		}
		if mf := e[base]; mf != nil && (mf.GetType() == dto.MetricType_HISTOGRAM || mf.GetType() == dto.MetricType_SUMMARY) {
			if suf == "_bucket" {
				return mf, []string{"le"}
			}
			return mf, nil
		}
	}
	return nil, nil
}

// values returns the values label takes across mf's series; has is false
// when no series carries it.
func values(mf *dto.MetricFamily, label string) (vals []string, has bool) {
	for _, m := range mf.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label {
				has = true
				if !slices.Contains(vals, l.GetValue()) {
					vals = append(vals, l.GetValue())
				}
			}
		}
	}
	return vals, has
}

// promqlParser is Prometheus' own PromQL parser with its default options.
var promqlParser = parser.NewParser(parser.Options{})

// checkQuery parses expr with Prometheus' parser and returns what is wrong
// with it against e: a metric no component emits, a label matcher on a
// label its series do not carry or on a value they never take, a
// `by (...)` label the aggregated series lack.
func checkQuery(e emitted, expr string) []error {
	node, err := promqlParser.ParseExpr(expr)
	if err != nil {
		return []error{fmt.Errorf("does not parse: %w", err)}
	}
	var errs []error
	parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.VectorSelector:
			errs = append(errs, checkSelector(e, n)...)
		case *parser.AggregateExpr:
			if n.Without {
				break
			}
			for _, l := range n.Grouping {
				if producedBy(n.Expr, l) {
					continue
				}
				for _, vs := range selectors(n.Expr) {
					if mf, extra := e.family(vs.Name); mf != nil && !slices.Contains(extra, l) {
						if _, has := values(mf, l); !has {
							errs = append(errs, fmt.Errorf("aggregates by %q, a label %s does not have", l, vs.Name))
						}
					}
				}
			}
		}
		return nil
	})
	return errs
}

func checkSelector(e emitted, vs *parser.VectorSelector) []error {
	name := vs.Name
	if name == "" {
		return []error{fmt.Errorf("selector %s names no metric", vs)}
	}
	mf, extra := e.family(name)
	if mf == nil {
		return []error{fmt.Errorf("names %s, which no component registered and emitted in the pipeline run", name)}
	}
	var errs []error
	for _, m := range vs.LabelMatchers {
		if m.Name == labels.MetricName {
			continue
		}
		if slices.Contains(extra, m.Name) {
			continue
		}
		vals, has := values(mf, m.Name)
		if !has {
			errs = append(errs, fmt.Errorf("%s: matches label %q, which its series do not have", name, m.Name))
			continue
		}
		switch m.Type {
		case labels.MatchEqual, labels.MatchNotEqual:
			if !slices.Contains(vals, m.Value) {
				errs = append(errs, fmt.Errorf("%s: %s, a value it never takes (it takes %q)", name, m, vals))
			}
		case labels.MatchRegexp:
			if !slices.ContainsFunc(vals, m.Matches) {
				errs = append(errs, fmt.Errorf("%s: %s matches none of its values %q", name, m, vals))
			}
		}
	}
	return errs
}

// selectors lists the vector selectors under n.
func selectors(n parser.Node) []*parser.VectorSelector {
	var out []*parser.VectorSelector
	parser.Inspect(n, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			out = append(out, vs)
		}
		return nil
	})
	return out
}

// producedBy reports whether a label_replace or label_join under n writes
// label.
func producedBy(n parser.Node, label string) bool {
	found := false
	parser.Inspect(n, func(n parser.Node, _ []parser.Node) error {
		if c, ok := n.(*parser.Call); ok && (c.Func.Name == "label_replace" || c.Func.Name == "label_join") && len(c.Args) > 1 {
			if s, ok := c.Args[1].(*parser.StringLiteral); ok && s.Val == label {
				found = true
			}
		}
		return nil
	})
	return found
}

// The checker itself: it catches each kind of mistake it exists for.
func TestCheckQueryCatches(t *testing.T) {
	e := emitted{}
	gauge := dto.MetricType_GAUGE
	str := func(s string) *string { return &s }
	e["roomflow_x"] = &dto.MetricFamily{Name: str("roomflow_x"), Type: &gauge, Metric: []*dto.Metric{
		{Label: []*dto.LabelPair{{Name: str("processor"), Value: str("room")}, {Name: str("result"), Value: str("ok")}}},
	}}
	for expr, want := range map[string]string{
		`roomflow_x`:                      "",
		`sum by (processor) (roomflow_x)`: "",
		`roomflow_x{result!="ok"}`:        "",
		`roomflow_y`:                      "names roomflow_y",
		`max by (group) (roomflow_x)`:     `aggregates by "group"`,
		`roomflow_x{result="delivered"}`:  "a value it never takes",
		`roomflow_x{code="1"}`:            `label "code"`,
		`roomflow_x{result=~"fail.*"}`:    "matches none",
		`sum by (stage) (label_replace(roomflow_x, "stage", "a", "", ""))`: "",
		`roomflow_x >`: "does not parse",
	} {
		errs := checkQuery(e, expr)
		switch {
		case want == "" && len(errs) > 0:
			t.Errorf("%s: %v", expr, errs)
		case want != "" && (len(errs) == 0 || !strings.Contains(fmt.Sprint(errs), want)):
			t.Errorf("%s: got %v, want an error with %q", expr, errs, want)
		}
	}
}
