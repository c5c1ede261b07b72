package luckyctl_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hyapp/roomflow/domain/lucky"
	"github.com/hyapp/roomflow/services/luckydraw/simulate"
	"github.com/hyapp/roomflow/tools/luckyctl"
)

// The report holds every measure the simulator promises and links two
// rendered charts, the rate chart with the target band.
func TestWriteReport(t *testing.T) {
	r, err := simulate.Run(simulate.Config{Rules: []*lucky.Rule{{GiftID: "rose", RuleVersion: "v1", GiftPrice: 100, PoolRatePPM: 900_000,
		TargetPayoutRatePPM: 900_000, Status: "active", Tiers: []lucky.Tier{
			{TierID: "none", RewardType: "none", ProbabilityPPM: 900_000, Enabled: true},
			{TierID: "x9", RewardType: "multiplier", RewardValue: 9, ProbabilityPPM: 100_000, Enabled: true}}}},
		Platform: simulate.Pool{Balance: 1e9}, Gift: simulate.Pool{Balance: 1e9}, Room: simulate.Pool{Balance: 1e9}, Seed: 1,
		Traffic: simulate.Traffic{Rooms: 10, Users: 100, GiftMix: []simulate.GiftShare{{GiftID: "rose", GiftCount: 1, Weight: 1}},
			Draws: 20_000, Hours: 4}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := luckyctl.WriteSimReport(dir, "rose v1", r, 100_000); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# rose v1", "| rose | v1 | 900000 | 900000 ± 100000 |", "95% interval", "hit frequency",
		"| per user-day |", "| per room-hour |", "removed a tier", "| platform global |", "| gift rose |", "| room room-0 |",
		"largest room drawdown", luckyctl.SimRateChart, luckyctl.SimBalanceChart} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
	svg, err := os.ReadFile(filepath.Join(dir, luckyctl.SimRateChart))
	if err != nil || !strings.Contains(string(svg), "<svg") || !strings.Contains(string(svg), "rose target+band") {
		t.Errorf("rate chart: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, luckyctl.SimBalanceChart)); err != nil {
		t.Error(err)
	}
}
