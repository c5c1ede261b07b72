package command

import (
	"strings"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/cli"
	"github.com/hyapp/roomflow/internal/testenv"
)

// lucky fairness schedule stores a later day's mode; bad input exits 2
// naming the flag, a day verify cannot check exits 1.
func TestLuckyFairnessCommands(t *testing.T) {
	m := testenv.NewMySQL(t)
	cfg := "app_code: hy\nmysql:\n  dsn: \"" + m.DSN + "\"\nlog:\n  level: error\nmetrics:\n  addr: \"\"\n"
	today := time.Now().UTC().Format(time.DateOnly)
	later := time.Now().UTC().Add(72 * time.Hour).Format(time.DateOnly)
	if out, err := runCLI(t, cfg, "lucky", "fairness", "schedule", "--mode", "commit_reveal", "--from", later); err != nil ||
		!strings.Contains(out, "hy fairness schedule days from "+later+": (none) -> commit_reveal") {
		t.Fatalf("schedule: %v %s", err, out)
	}
	for _, tc := range []struct {
		args   []string
		status int
		names  string
	}{
		{[]string{"schedule", "--mode", "commit_reveal", "--from", today}, 2, "today or a past day"},
		{[]string{"schedule", "--mode", "fair", "--from", later}, 2, "--mode"},
		{[]string{"schedule", "--mode", "crypto", "--from", "tomorrow"}, 2, "--from"},
		{[]string{"schedule", "--mode", "crypto"}, 2, "--from is required"},
		{[]string{"verify", "--day", "2026-13-45"}, 2, "--day"},
		{[]string{"verify", "--day", today}, 1, "no fairness day"},
	} {
		out, err := runCLI(t, cfg, append([]string{"lucky", "fairness"}, tc.args...)...)
		if err == nil || cli.ExitCode(err) != tc.status || !strings.Contains(err.Error(), tc.names) {
			t.Errorf("lucky fairness %v: exit %d (%v), want %d naming %q\n%s", tc.args, cli.ExitCode(err), err, tc.status, tc.names, out)
		}
	}
	var n int
	if err := m.DB.QueryRow(`SELECT COUNT(*) FROM lucky_fairness_schedule`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d schedule rows after bad input (%v), want the one stored", n, err)
	}
}
