package simulate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The report holds every measure the simulator promises and links two
// rendered charts, the rate chart with the target band.
func TestWriteReport(t *testing.T) {
	c := testConfig()
	c.Traffic.Draws = 20_000
	r, err := Run(c)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := WriteReport(dir, "rose v1", r, 100_000); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# rose v1", "| rose | v1 | 900000 | 900000 ± 100000 |", "95% interval", "hit frequency",
		"| per user-day |", "| per room-hour |", "removed a tier", "| platform global |", "| gift rose |", "| room room-0 |",
		"largest room drawdown", RateChart, BalanceChart} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
	svg, err := os.ReadFile(filepath.Join(dir, RateChart))
	if err != nil || !strings.Contains(string(svg), "<svg") || !strings.Contains(string(svg), "rose target+band") {
		t.Errorf("rate chart: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, BalanceChart)); err != nil {
		t.Error(err)
	}
}
