package command

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hyapp/roomflow/internal/cli"
	"github.com/hyapp/roomflow/internal/testenv"
)

// TestLuckyTierCommands: `lucky tier disable|enable` switch one tier with
// the admin trail; malformed arguments exit 2, refusals and unknown names
// exit 1, and neither writes anything.
func TestLuckyTierCommands(t *testing.T) {
	m := testenv.NewMySQL(t)
	cfg := "mysql:\n  dsn: \"" + m.DSN + "\"\nlog:\n  level: error\nmetrics:\n  addr: \"\"\n"
	p := filepath.Join(t.TempDir(), "rule.yaml")
	os.WriteFile(p, []byte(luckyRuleYAML), 0o600)
	if out, err := runCLI(t, cfg, "lucky", "rules", "publish", p); err != nil || !strings.Contains(out, "WARNING: lucky-star/v1 marks no tier large") {
		t.Fatalf("publish of an active version that marks no tier large must warn: %v %s", err, out)
	}
	marked := filepath.Join(t.TempDir(), "marked.yaml")
	os.WriteFile(marked, []byte(strings.Replace(strings.Replace(luckyRuleYAML, "rule_version: v1", "rule_version: v2", 1),
		"reward_value: 1, probability_ppm: 500000}", "reward_value: 1, probability_ppm: 500000, large: true}", 1)), 0o600)
	if out, err := runCLI(t, cfg, "lucky", "rules", "publish", marked); err != nil || strings.Contains(out, "WARNING") {
		t.Fatalf("publish of a version marking a large tier: %v %s", err, out)
	}
	if out, err := runCLI(t, cfg, "lucky", "switch", "large_tier_enabled", "off"); err != nil || !strings.Contains(out, "disables 1 enabled tiers marked large") {
		t.Fatalf("switch large_tier_enabled off: %v %s", err, out)
	}
	if out, err := runCLI(t, cfg, "lucky", "tier", "disable", "lucky-star", "v2", "small_1x", "--operator", "bob"); err != nil ||
		!strings.Contains(out, "tier lucky-star/v2/small_1x: on -> off") {
		t.Fatalf("tier disable: %v %s", err, out)
	}
	var enabled bool
	m.DB.QueryRow(`SELECT enabled FROM lucky_reward_tiers WHERE tier_id = 'small_1x' AND rule_version = 'v2'`).Scan(&enabled)
	if enabled {
		t.Fatal("small_1x still enabled")
	}
	if out, err := runCLI(t, cfg, "lucky", "admin-log", "--since", "1h"); err != nil || !strings.Contains(out, "bob@") ||
		!strings.Contains(out, "tier\tlucky-star/v2/small_1x\ton -> off") {
		t.Fatalf("admin-log: %v\n%s", err, out)
	}
	var logged int64
	m.DB.QueryRow(`SELECT COUNT(*) FROM lucky_admin_log`).Scan(&logged)
	for _, tc := range []struct {
		args   []string
		status int
		names  string
	}{
		{[]string{"tier", "disable", "lucky-star", "v2"}, 2, "3 arg"},
		{[]string{"tier", "off", "lucky-star", "v2", "small_1x"}, 2, "unknown command"},
		{[]string{"tier", "enable", "lucky-star", "v2", strings.Repeat("t", 65)}, 2, "TIER_ID"},
		{[]string{"tier", "enable", "lucky-star", "", "small_1x"}, 2, "RULE_VERSION"},
		{[]string{"tier", "disable", "lucky-star", "v2", "none"}, 1, "none tier"},
		{[]string{"tier", "enable", "lucky-star", "v9", "small_1x"}, 1, `version "v9"`},
		{[]string{"tier", "disable", "lucky-star", "v1", "small_1x"}, 1, "retired"},
		{[]string{"tier", "enable", "tulip", "v1", "small_1x"}, 1, `gift "tulip"`},
		{[]string{"tier", "enable", "lucky-star", "v2", "big"}, 1, "unknown tier"},
	} {
		out, err := runCLI(t, cfg, append([]string{"lucky"}, tc.args...)...)
		if err == nil || cli.ExitCode(err) != tc.status || !strings.Contains(err.Error(), tc.names) {
			t.Errorf("lucky %v: exit %d (%v), want %d naming %q\n%s", tc.args, cli.ExitCode(err), err, tc.status, tc.names, out)
		}
	}
	var after int64
	m.DB.QueryRow(`SELECT COUNT(*) FROM lucky_admin_log`).Scan(&after)
	if after != logged {
		t.Fatalf("bad tier commands wrote %d admin log rows", after-logged)
	}
}

// TestLuckyPilotCommands: `switch pilot_mode` warns on an empty list,
// `switch pilot_room on --room R` lists a room (the 51st is refused, exit
// 1), --room goes with the per-room switches only (exit 2), and
// lucky.switches.pilot_mode is a known key.
func TestLuckyPilotCommands(t *testing.T) {
	m := testenv.NewMySQL(t)
	cfg := "mysql:\n  dsn: \"" + m.DSN + "\"\nlog:\n  level: error\nmetrics:\n  addr: \"\"\nlucky:\n  switches:\n    pilot_mode: true\n"
	if out, err := runCLI(t, cfg, "lucky", "switch", "pilot_room", "off", "--room", "r9"); err != nil || !strings.Contains(out, "WARNING: pilot_mode is on") {
		t.Fatalf("pilot_mode on by its start value with an empty list must warn: %v %s", err, out)
	}
	if out, err := runCLI(t, cfg, "lucky", "switch", "pilot_mode", "on"); err != nil || !strings.Contains(out, "WARNING: pilot_mode is on") {
		t.Fatalf("switch pilot_mode on with an empty list must warn: %v %s", err, out)
	}
	if out, err := runCLI(t, cfg, "lucky", "switch", "pilot_room", "on", "--room", "r1"); err != nil || !strings.Contains(out, "switch pilot_room r1: default -> on") ||
		!strings.Contains(out, "1 pilot rooms") || strings.Contains(out, "WARNING") {
		t.Fatalf("switch pilot_room on: %v %s", err, out)
	}
	for i := 2; i <= 50; i++ {
		// r1's app_code: the configured default app.
		m.DB.Exec(`INSERT INTO lucky_switches (app_code, name, scope_id, enabled, updated_at_ms)
	SELECT app_code, 'pilot_room', ?, TRUE, 1 FROM lucky_switches WHERE scope_id = 'r1'`, fmt.Sprintf("pr-%d", i))
	}
	for _, tc := range []struct {
		args   []string
		status int
		names  string
	}{
		{[]string{"switch", "pilot_room", "on", "--room", "pr-51"}, 1, "at most 50"},
		{[]string{"switch", "pilot_room", "on"}, 2, "--room"},
		{[]string{"switch", "pilot_mode", "on", "--room", "r1"}, 2, "--room"},
		{[]string{"switch", "pilot_room", "on", "--room", strings.Repeat("r", 65)}, 2, "--room"},
	} {
		out, err := runCLI(t, cfg, append([]string{"lucky"}, tc.args...)...)
		if err == nil || cli.ExitCode(err) != tc.status || !strings.Contains(err.Error(), tc.names) {
			t.Errorf("lucky %v: exit %d (%v), want %d naming %q\n%s", tc.args, cli.ExitCode(err), err, tc.status, tc.names, out)
		}
	}
	var rooms int64
	m.DB.QueryRow(`SELECT COUNT(*) FROM lucky_switches WHERE name = 'pilot_room' AND enabled`).Scan(&rooms)
	if rooms != 50 {
		t.Fatalf("%d pilot rooms after the refusals, want 50", rooms)
	}
	if _, err := runCLI(t, cfg+"    pilot_moed: true\n", "lucky", "switch", "pilot_mode", "default"); err == nil || cli.ExitCode(err) != 2 {
		t.Fatalf("an unknown lucky.switches key: %v", err)
	}
}
