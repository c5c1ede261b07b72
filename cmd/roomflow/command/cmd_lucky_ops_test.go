package command

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/cli"
	"github.com/hyapp/roomflow/internal/testenv"
)

// TestLuckyOperatorInputRefused: operator input that would write what no
// draw can use, or break every draw after it, exits 2 naming the flag and
// writes nothing, to the admin trail neither. Before: an amount to
// BIGINT's top was funded (every draw failed after it); a platform scope
// id other than global funded a pool no draw reads (exit 0); a scope id
// ending in a space exited 1, refused by the service, not naming the flag;
// a --room ending in a space was stored as a pause or pilot room of no
// room (exit 0).
func TestLuckyOperatorInputRefused(t *testing.T) {
	m := testenv.NewMySQL(t)
	cfg := "mysql:\n  dsn: \"" + m.DSN + "\"\nlog:\n  level: error\nmetrics:\n  addr: \"\"\n"
	for _, tc := range []struct {
		args  []string
		names string
	}{
		{[]string{"pools", "fund", "--amount", "9223372036854775807"}, "--amount"},
		{[]string{"pools", "fund", "--scope-type", "platform", "--scope-id", "Global", "--amount", "5"}, "--scope-id"},
		{[]string{"pools", "fund", "--scope-type", "room", "--scope-id", "r9 ", "--amount", "5"}, "--scope-id"},
		{[]string{"switch", "room_scope_paused", "on", "--room", "r1 "}, "--room"},
		{[]string{"switch", "pilot_room", "on", "--room", "r1 "}, "--room"},
	} {
		out, err := runCLI(t, cfg, append([]string{"lucky"}, tc.args...)...)
		if err == nil || cli.ExitCode(err) != 2 || !strings.Contains(err.Error(), tc.names) {
			t.Errorf("lucky %q: exit %d (%v), want 2 naming %q\n%s", tc.args, cli.ExitCode(err), err, tc.names, out)
		}
	}
	var pools, switches, logged int
	m.DB.QueryRow(`SELECT COUNT(*) FROM lucky_pools`).Scan(&pools)
	m.DB.QueryRow(`SELECT COUNT(*) FROM lucky_switches`).Scan(&switches)
	m.DB.QueryRow(`SELECT COUNT(*) FROM lucky_admin_log`).Scan(&logged)
	if pools != 0 || switches != 0 || logged != 0 {
		t.Errorf("refused input wrote %d pools, %d switch overrides, %d admin log rows", pools, switches, logged)
	}
}

// TestLuckyFairnessScheduleIsLogged: `fairness schedule` is an operator
// change like the others (docs/design.md, Admin trail): who scheduled
// which mode from which day, and what it replaced, is in lucky_admin_log.
// Before, it wrote only lucky_fairness_schedule: admin-log showed nothing.
func TestLuckyFairnessScheduleIsLogged(t *testing.T) {
	m := testenv.NewMySQL(t)
	cfg := "app_code: hy\nmysql:\n  dsn: \"" + m.DSN + "\"\nlog:\n  level: error\nmetrics:\n  addr: \"\"\n"
	t.Setenv("USER", "carol")
	later := time.Now().UTC().Add(72 * time.Hour).Format(time.DateOnly)
	for _, mode := range []string{"commit_reveal", "crypto"} {
		if out, err := runCLI(t, cfg, "lucky", "fairness", "schedule", "--mode", mode, "--from", later); err != nil {
			t.Fatalf("schedule %s: %v %s", mode, err, out)
		}
	}
	out, err := runCLI(t, cfg, "lucky", "admin-log", "--since", "1h")
	for _, want := range []string{"carol@", "\thy\tfairness schedule\tdays from " + later + "\t(none) -> commit_reveal",
		"\thy\tfairness schedule\tdays from " + later + "\tcommit_reveal -> crypto", "2 changes in the last"} {
		if err != nil || !strings.Contains(out, want) {
			t.Fatalf("admin-log: want %q: %v\n%s", want, err, out)
		}
	}
}

// TestLuckyRulesPublishRefusesBadIDs: `rules publish` refuses ids the
// tables cannot hold or no draw can name, exit 2 naming the key, nothing
// written. Before, a gift_id ending in a space was published (exit 0) as a
// rule no draw can reach (Execute refuses such a gift id), and an id over
// its 64-byte column failed in MySQL (exit 1, "Data too long").
func TestLuckyRulesPublishRefusesBadIDs(t *testing.T) {
	m := testenv.NewMySQL(t)
	cfg := "mysql:\n  dsn: \"" + m.DSN + "\"\nlog:\n  level: error\nmetrics:\n  addr: \"\"\n"
	long := strings.Repeat("v", 65)
	for _, tc := range []struct{ old, new, names string }{
		{"gift_id: lucky-star", `gift_id: "lucky-star "`, "gift_id"},
		{"rule_version: v1", `rule_version: "v1 "`, "rule_version"},
		{"rule_version: v1", "rule_version: " + long, "rule_version"},
		{"tier_id: small_1x", "tier_id: " + long, "tier_id"},
	} {
		p := filepath.Join(t.TempDir(), "rule.yaml")
		os.WriteFile(p, []byte(strings.Replace(luckyRuleYAML, tc.old, tc.new, 1)), 0o600)
		out, err := runCLI(t, cfg, "lucky", "rules", "publish", p)
		if err == nil || cli.ExitCode(err) != 2 || !strings.Contains(err.Error(), tc.names) {
			t.Errorf("publish with %s: exit %d (%v), want 2 naming %q\n%s", tc.new, cli.ExitCode(err), err, tc.names, out)
		}
	}
	var rules int
	m.DB.QueryRow(`SELECT COUNT(*) FROM lucky_gift_rules`).Scan(&rules)
	if rules != 0 {
		t.Errorf("refused rules wrote %d versions", rules)
	}
}

// TestLuckyAuditFlags: `lucky audit` with no draws chosen, both ways, or a
// --since that is not positive is a usage error (exit 2) naming the flags.
// Before, --since -24h audited the draws after a time in the future, none,
// and passed ("audited 0 draws: 0 match, 0 differ", exit 0); the other two
// exited 1.
func TestLuckyAuditFlags(t *testing.T) {
	m := testenv.NewMySQL(t)
	cfg := "mysql:\n  dsn: \"" + m.DSN + "\"\nlog:\n  level: error\nmetrics:\n  addr: \"\"\nlucky:\n  audit_key: k\n"
	for _, args := range [][]string{{"--since", "-24h"}, {}, {"--since", "1h", "--draw-id", "LD-1"}} {
		out, err := runCLI(t, cfg, append([]string{"lucky", "audit"}, args...)...)
		if err == nil || cli.ExitCode(err) != 2 || !strings.Contains(err.Error(), "--since") {
			t.Errorf("lucky audit %q: exit %d (%v), want 2 naming --since\n%s", args, cli.ExitCode(err), err, out)
		}
	}
}

// TestLuckyPoolsFundID: `pools fund` retried (a timeout, a lost answer, a
// Job's second pod) funded the pool twice. With --fund-id the first run
// applies; a retry prints that it was already applied, with when, and
// changes nothing; the same id with another amount or floor exits 1
// naming --fund-id, nothing written; an id that is empty, ends in a space
// or is over 128 bytes exits 2 naming --fund-id. Two runs at once apply
// once. Without --fund-id every run adds, as before.
func TestLuckyPoolsFundID(t *testing.T) {
	m := testenv.NewMySQL(t)
	cfg := "app_code: hy\nmysql:\n  dsn: \"" + m.DSN + "\"\nlog:\n  level: error\nmetrics:\n  addr: \"\"\n"
	t.Setenv("USER", "carol")
	fund := func(args ...string) (string, error) {
		return runCLI(t, cfg, append([]string{"lucky", "pools", "fund", "--scope-type", "room", "--scope-id", "r9"}, args...)...)
	}
	state := func() (balance, logged, funds int) {
		m.DB.QueryRow(`SELECT COALESCE(SUM(balance), 0) FROM lucky_pools`).Scan(&balance)
		m.DB.QueryRow(`SELECT COUNT(*) FROM lucky_admin_log`).Scan(&logged)
		m.DB.QueryRow(`SELECT COUNT(*) FROM lucky_pool_funds`).Scan(&funds)
		return
	}
	if out, err := fund("--amount", "500", "--fund-id", "CHG-1"); err != nil || !strings.Contains(out, "-> balance 500, reserve_floor 0, fund_id CHG-1") {
		t.Fatalf("first fund: %v\n%s", err, out)
	}
	if out, err := fund("--amount", "500", "--fund-id", "CHG-1"); err != nil || !strings.Contains(out, `note: fund id "CHG-1" already applied at `) ||
		!strings.Contains(out, "by carol: nothing changed") {
		t.Fatalf("retry: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"--amount", "600", "--fund-id", "CHG-1"}, 1},
		{[]string{"--amount", "500", "--reserve-floor", "5", "--fund-id", "CHG-1"}, 1},
		{[]string{"--amount", "500", "--fund-id", "CHG-1 "}, 2},
		{[]string{"--amount", "500", "--fund-id", strings.Repeat("c", 129)}, 2},
		{[]string{"--amount", "500", "--fund-id", ""}, 2},
	} {
		out, err := fund(tc.args...)
		if err == nil || cli.ExitCode(err) != tc.code || !strings.Contains(err.Error(), "--fund-id") {
			t.Errorf("fund %q: exit %d (%v), want %d naming --fund-id\n%s", tc.args, cli.ExitCode(err), err, tc.code, out)
		}
	}
	if b, l, f := state(); b != 500 || l != 1 || f != 1 {
		t.Fatalf("after the retry and the refusals: balance %d, %d admin log rows, %d funds; want 500, 1, 1", b, l, f)
	}
	outs := make(chan string, 2)
	for range 2 {
		go func() {
			out, err := fund("--amount", "100", "--fund-id", "CHG-2")
			if err != nil {
				out = err.Error()
			}
			outs <- out
		}()
	}
	if a, b := <-outs, <-outs; strings.Contains(a, "already applied") == strings.Contains(b, "already applied") {
		t.Errorf("two runs of CHG-2 at once, want one applied and one already applied:\n%s\n%s", a, b)
	}
	for range 2 {
		if out, err := fund("--amount", "100"); err != nil || strings.Contains(out, "fund_id") || strings.Contains(out, "note:") {
			t.Fatalf("fund without --fund-id: %v\n%s", err, out)
		}
	}
	if b, l, f := state(); b != 800 || l != 4 || f != 2 {
		t.Fatalf("after CHG-2 and two funds without an id: balance %d, %d admin log rows, %d funds; want 800, 4, 2", b, l, f)
	}
}
