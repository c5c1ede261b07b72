package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hyapp/roomflow/benchmarks/internal/benchparse"
)

// The table gives each stage's spread and share, names stages without a
// run, and the chart has one bar group per measured stage.
func TestWrite(t *testing.T) {
	svg := filepath.Join(t.TempDir(), "stages.svg")
	var b bytes.Buffer
	err := write(&b, []benchparse.Stage{
		{Name: "sink", Unit: "entries/s", Ref: "raw", Runs: []benchparse.Run{{Value: 30000, Ref: 31500}, {Value: 29000, Ref: 30000}, {Value: 15000, Ref: 30000}}},
		{Name: "IM, saturated", Unit: "calls/s", Ref: "limit"},
	}, []string{"lucky"}, svg)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| sink | entries/s | 3 | 15000 / 29000 / 30000 | raw | 30000 | 50% / 95% / 97% |",
		"| IM, saturated | calls/s | 0 | not measured in this run | limit | | |",
		"No output in this run: lucky.",
		"](stages.svg)",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in\n%s", want, b.String())
		}
	}
	raw, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(raw), "<rect "); n < 3 {
		t.Fatalf("%d bars in the chart, want 3 (min, median, max of the sink)", n)
	}
}
