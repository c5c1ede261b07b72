package command

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hyapp/roomflow/internal/cli"
	"github.com/hyapp/roomflow/internal/testenv"
)

// simRuleYAML pays 900,000 ppm analytically, its target.
const simRuleYAML = `gift_id: lucky-rose
rule_version: v2
gift_price: 100
pool_rate_ppm: 950000
platform_weight_ppm: 200000
room_weight_ppm: 300000
target_payout_rate_ppm: 900000
status: active
tiers:
  - {tier_id: none, reward_type: none, probability_ppm: 900000}
  - {tier_id: small_4x, reward_type: multiplier, reward_value: 4, probability_ppm: 90000}
  - {tier_id: big_54x, reward_type: multiplier, reward_value: 54, probability_ppm: 10000}
`

func writeRule(t *testing.T, yaml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "rule.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// A simulation prints every measure and writes its report; it needs no
// MySQL.
func TestLuckyRulesSimulate(t *testing.T) {
	cfg := "log:\n  level: error\n"
	dir := filepath.Join(t.TempDir(), "rep")
	out, err := runCLI(t, cfg, "lucky", "rules", "simulate", writeRule(t, simRuleYAML), "--draws", "100000", "--hours", "6",
		"--gift-mix", "lucky-rose:1=3,lucky-rose:10=1", "--seed", "3", "--report", dir)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"| lucky-rose | v2 | 900000 | 900000 ± 100000 |", "95% interval", "hit frequency", "| per user-day |",
		"| per room-hour |", "removed a tier", "a floor first removed a tier", "report: " + dir} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "payout-rate.svg")); err != nil {
		t.Error(err)
	}
}

// Each bad input exits 2 naming its flag, file or field, before anything
// connects (no MySQL configured) or, for an app without pools, right
// after reading them.
func TestLuckyRulesSimulateBadInput(t *testing.T) {
	cfg := "log:\n  level: error\n"
	good := writeRule(t, simRuleYAML)
	badSum := writeRule(t, strings.Replace(simRuleYAML, "probability_ppm: 900000", "probability_ppm: 800000", 1))
	free := writeRule(t, strings.Replace(simRuleYAML, "gift_price: 100", "gift_price: 0", 1))
	for name, c := range map[string]struct {
		args []string
		want string
	}{
		"rule does not validate": {[]string{badSum, "--draws", "10"}, "tiers.probability_ppm: sum is 900000"},
		"not a rule file":        {[]string{writeRule(t, "gift: x\n"), "--draws", "10"}, "FILE"},
		"zero rate":              {[]string{good, "--rate", "0"}, "--rate must be > 0"},
		"negative rate":          {[]string{good, "--rate", "-2"}, "--rate must be > 0"},
		"draws and rate":         {[]string{good, "--draws", "10", "--rate", "5"}, "--draws and --rate"},
		"zero draws and rate":    {[]string{good, "--draws", "0", "--rate", "5"}, "--draws and --rate"},
		"neither":                {[]string{good}, "--draws must be > 0"},
		"unknown gift":           {[]string{good, "--draws", "10", "--gift-mix", "lucky-tulip:1"}, `--gift-mix: unknown gift "lucky-tulip"`},
		"gift_price 0":           {[]string{free, "--draws", "10"}, "gift_price must be > 0"},
		"zero hours":             {[]string{good, "--draws", "10", "--hours", "0"}, "--hours: must be > 0"},
		"no rooms":               {[]string{good, "--draws", "10", "--rooms", "0"}, "--rooms: must be > 0"},
	} {
		out, err := runCLI(t, cfg, append([]string{"lucky", "rules", "simulate"}, c.args...)...)
		if cli.ExitCode(err) != 2 || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: exit %d %v, want 2 naming %q\n%s", name, cli.ExitCode(err), err, c.want, out)
		}
	}
	m := testenv.NewMySQL(t)
	_, err := runCLI(t, "mysql:\n  dsn: \""+m.DSN+"\"\n"+cfg, "lucky", "rules", "simulate", good, "--draws", "10",
		"--pools-from-mysql", "--app-code", "nosuchapp")
	if cli.ExitCode(err) != 2 || !strings.Contains(err.Error(), `--app-code: unknown app "nosuchapp"`) {
		t.Errorf("unknown app: exit %d %v", cli.ExitCode(err), err)
	}
}

// rules publish prints the analytic rate and refuses a table outside the
// band, or without a rate, unless --force; 0 switches the band off. All
// before MySQL (none configured: a refused publish never connects).
func TestLuckyRulesPublishPayoutBand(t *testing.T) {
	cfg := "log:\n  level: error\n"
	far := writeRule(t, strings.Replace(simRuleYAML, "target_payout_rate_ppm: 900000", "target_payout_rate_ppm: 700000", 1))
	out, err := runCLI(t, cfg, "lucky", "rules", "publish", far)
	if cli.ExitCode(err) != 2 || !strings.Contains(err.Error(), "lucky.publish_payout_band_ppm") ||
		!strings.Contains(out, "analytic payout rate: 900000 ppm (target_payout_rate_ppm 700000)") {
		t.Fatalf("out of band: exit %d %v\n%s", cli.ExitCode(err), err, out)
	}
	fixed := writeRule(t, strings.Replace(strings.Replace(simRuleYAML, "gift_price: 100", "gift_price: 0", 1),
		"reward_type: multiplier, reward_value: 54", "reward_type: fixed, reward_value: 5400", 1))
	if _, err := runCLI(t, cfg, "lucky", "rules", "publish", fixed); cli.ExitCode(err) != 2 || !strings.Contains(err.Error(), "gift_price") {
		t.Fatalf("fixed tier at gift_price 0: exit %d %v", cli.ExitCode(err), err)
	}
	if _, err := runCLI(t, cfg+"lucky:\n  publish_payout_band_ppm: -1\n", "lucky", "rules", "publish", far); cli.ExitCode(err) != 2 ||
		!strings.Contains(err.Error(), "lucky.publish_payout_band_ppm") {
		t.Fatalf("band -1: exit %d %v", cli.ExitCode(err), err)
	}
	// Past the check (--force, band 0), publish reaches MySQL: with none
	// configured it fails there, not with exit 2.
	for _, c := range []struct{ cfg, arg string }{{cfg, "--force"}, {cfg + "lucky:\n  publish_payout_band_ppm: 0\n", ""}} {
		args := []string{"lucky", "rules", "publish", far}
		if c.arg != "" {
			args = append(args, c.arg)
		}
		out, err := runCLI(t, c.cfg+"mysql:\n  dsn: \"nobody@tcp(127.0.0.1:1)/none\"\n", args...)
		if err == nil || cli.ExitCode(err) == 2 || !strings.Contains(out, "analytic payout rate: 900000 ppm") {
			t.Errorf("%q %s: exit %d %v\n%s", c.arg, strings.TrimSpace(c.cfg), cli.ExitCode(err), err, out)
		}
	}
}
