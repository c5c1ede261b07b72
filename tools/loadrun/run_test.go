package loadrun

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/producers/loadgen"
)

// A load test's own defaults fill the flags not given and keep the ones
// given; a bad shape is named by its flag, a hold past the relay's gap age
// by --late-commit-hold.
func TestLoadTestDefaults(t *testing.T) {
	cfg := config.Default()
	none := func(string) bool { return false }
	sc, ld, o := loadgen.DefaultScenario(), loadgen.DefaultLoad(), Options{To: "mysql", Batch: 50}
	ld.Duration = time.Minute
	if err := loadTestDefaults(&cfg, &sc, &ld, &o, none); err != nil {
		t.Fatal(err)
	}
	if sc.Users != 100_000 || sc.Rooms != 2_000 || ld.Rate != loadgen.DefaultLoad().Rate || ld.Batch != 50 || ld.To != "mysql" {
		t.Errorf("defaults: users %d rooms %d rate %v batch %d", sc.Users, sc.Rooms, ld.Rate, ld.Batch)
	}
	sc, o = loadgen.DefaultScenario(), Options{To: "mysql", Batch: 50, Rate: 7}
	if err := loadTestDefaults(&cfg, &sc, &ld, &o, func(string) bool { return true }); err != nil || sc.Users != loadgen.DefaultScenario().Users || ld.Rate != 7 {
		t.Errorf("given flags kept: %v, users %d rate %v", err, sc.Users, ld.Rate)
	}
	ld.Writers = -1
	if err := loadTestDefaults(&cfg, &sc, &ld, &o, none); !slices.Contains(cfgerr.Keys(err), "--writers") {
		t.Errorf("--writers -1: %v", err)
	}
	ld = loadgen.DefaultLoad()
	ld.Duration, ld.LateCommitShare, ld.LateCommitHold = time.Minute, 0.1, cfg.Relay.GapMaxAge.D()
	if err := loadTestDefaults(&cfg, &sc, &ld, &o, none); !slices.Contains(cfgerr.Keys(err), "--late-commit-hold") {
		t.Errorf("hold at relay.gap_max_age: %v", err)
	}
}

// Flags that exclude each other are refused before anything connects.
func TestRunRefusesExclusiveFlags(t *testing.T) {
	cfg := config.Default()
	ld := loadgen.DefaultLoad()
	ld.Duration = time.Minute
	if err := Run(context.Background(), &cfg, loadgen.DefaultScenario(), ld, Options{Live: true}, func(string) bool { return false }); !cfgerr.IsUsage(err) {
		t.Errorf("--live --duration: %v, want a usage error", err)
	}
	ld.Duration = 0 // the scenario mode
	err := Run(context.Background(), &cfg, loadgen.DefaultScenario(), ld, Options{Live: true, To: "kafka"}, func(string) bool { return false })
	if err == nil || err.Error() != "--live writes to mysql only" {
		t.Errorf("--live --to kafka: %v", err)
	}
}
