package luckyctl_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/services/luckydraw"
	"github.com/hyapp/roomflow/tools/luckyctl"
)

// Bad input of `fairness schedule` is a usage error (exit 2) and writes
// nothing; a day verify cannot check is a plain error (exit 1).
func TestFairnessCommands(t *testing.T) {
	m := testenv.NewMySQL(t)
	cfg := config.Default()
	cfg.AppCode = "hy"
	ctx := context.Background()
	now := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
	var out bytes.Buffer
	a, err := luckydraw.NewAdmin(m.DB, luckydraw.AdminConfig{Operator: "test", Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	for name, o := range map[string]luckyctl.FairnessOptions{
		"bad mode":   {Mode: "fair", Day: "2026-12-10"},
		"no --from":  {Mode: "crypto"},
		"bad --from": {Mode: "crypto", Day: "10/12/2026"},
		"today":      {Mode: "crypto", Day: "2026-12-07"},
		"past day":   {Mode: "commit_reveal", Day: "2026-12-01"},
	} {
		if err := luckyctl.ScheduleFairness(ctx, a, &cfg, o, &out); !cfgerr.IsUsage(err) {
			t.Errorf("schedule %s: %v, want a usage error", name, err)
		}
	}
	var n int
	if err := m.DB.QueryRow(`SELECT COUNT(*) FROM lucky_fairness_schedule`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("refused schedules wrote %d rows (%v)", n, err)
	}
	if err := luckyctl.ScheduleFairness(ctx, a, &cfg, luckyctl.FairnessOptions{Mode: "commit_reveal", Day: "2026-12-09"}, &out); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "hy fairness schedule days from 2026-12-09: (none) -> commit_reveal\n" {
		t.Errorf("printed %q", got)
	}
	if err := luckyctl.VerifyFairness(ctx, m.DB, &cfg, luckyctl.FairnessOptions{Day: "2026-12-07x"}, &out); !cfgerr.IsUsage(err) {
		t.Errorf("verify bad --day: %v", err)
	}
	if err := luckyctl.VerifyFairness(ctx, m.DB, &cfg, luckyctl.FairnessOptions{Day: "2026-12-07"}, &out); err == nil || cfgerr.IsUsage(err) {
		t.Errorf("verify a day not stored: %v, want a plain error", err)
	}
}
