package luckyctl_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/services/luckydraw"
	"github.com/hyapp/roomflow/services/statsapi"
	"github.com/hyapp/roomflow/tools/luckyctl"
)

func TestPrintChanges(t *testing.T) {
	var b strings.Builder
	luckyctl.PrintChanges(&b,
		luckydraw.Change{AppCode: "hyapp", Command: "switch", Target: "pilot_mode", New: "on", Warning: "no pilot rooms"},
		luckydraw.Change{Command: "rules status", Target: "g1/v2", Old: "draft", New: "active", Note: "older than the deciding version"})
	want := "hyapp switch pilot_mode: (none) -> on\n  WARNING: no pilot rooms\n" +
		"rules status g1/v2: draft -> active\n  note: older than the deciding version\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

// Every argument mistake is a usage error (exit 2), found before anything
// connects; good arguments pass.
func TestArgumentChecks(t *testing.T) {
	on, err := luckyctl.ParseSwitch(luckydraw.SwitchPilotRoom, "on", "room-1")
	if err != nil || on == nil || !*on {
		t.Fatalf("pilot_room on --room room-1: %v %v", on, err)
	}
	if v, err := luckyctl.ParseSwitch(luckydraw.SwitchNames[0], "default", ""); err != nil || v != nil {
		t.Fatalf("default: %v %v", v, err)
	}
	for name, err := range map[string]error{
		"switch value":        func() error { _, err := luckyctl.ParseSwitch(luckydraw.SwitchNames[0], "maybe", ""); return err }(),
		"unknown switch":      func() error { _, err := luckyctl.ParseSwitch("nope", "on", ""); return err }(),
		"room without switch": func() error { _, err := luckyctl.ParseSwitch(luckydraw.SwitchNames[0], "on", "r"); return err }(),
		"per-room, no room":   func() error { _, err := luckyctl.ParseSwitch(luckydraw.SwitchRoomScopePaused, "on", ""); return err }(),
		"rule status":         luckyctl.CheckRuleStatus("live"),
		"scope type":          luckyctl.CheckFund("user", "x", 1, 0),
		"scope id":            luckyctl.CheckFund("room", "", 1, 0),
		"negative amount":     luckyctl.CheckFund("platform", "global", -1, 0),
		"padded fund id":      luckyctl.CheckFundID("f1 ", true),
		"long fund id":        luckyctl.CheckFundID(strings.Repeat("f", 129), true),
		"empty fund id":       luckyctl.CheckFundID("", true),
		"tier id":             luckyctl.CheckTierArgs("g", "v", strings.Repeat("t", 65)),
		"since":               luckyctl.CheckSince(0),
		"stats room":          luckyctl.CheckStats("", time.Hour),
	} {
		if !cfgerr.IsUsage(err) {
			t.Errorf("%s: %v, want a usage error", name, err)
		}
	}
	if err := luckyctl.CheckFund("gift", "g1", 0, 5); err != nil {
		t.Errorf("fund gift g1: %v", err)
	}
	if err := errors.Join(luckyctl.CheckFundID("", false), luckyctl.CheckFundID(strings.Repeat("f", 128), true)); err != nil {
		t.Errorf("no fund id, or one of 128 bytes: %v", err)
	}
	if err := (luckyctl.AuditOptions{}).Check(); err == nil {
		t.Error("audit with neither --draw-id nor --since accepted")
	}
	if err := (luckyctl.AuditOptions{DrawID: "d", Since: time.Hour}).Check(); err == nil {
		t.Error("audit with both --draw-id and --since accepted")
	}
}

func TestPrintRuleVersionsAndAdminLog(t *testing.T) {
	var b strings.Builder
	luckyctl.PrintRuleVersions(&b, []luckydraw.VersionState{
		{GiftID: "g1", Version: "v2", Status: "active", EffectiveAtMs: 0, Draws: true},
		{GiftID: "g1", Version: "v3", Status: "active", EffectiveAtMs: 3_600_000, Scheduled: true, Why: "effective in 1h"},
		{GiftID: "g1", Version: "v1", Status: "retired", Why: "retired"},
	})
	want := "g1/v2\tactive\teffective 1970-01-01T00:00:00Z\tDRAWS\n" +
		"g1/v3\tactive\teffective 1970-01-01T01:00:00Z\teffective in 1h\n" +
		"g1/v1\tretired\teffective 1970-01-01T00:00:00Z\tdoes not draw: retired\n"
	if b.String() != want {
		t.Errorf("rules show:\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	luckyctl.PrintAdminLog(&b, []luckydraw.LogEntry{{Change: luckydraw.Change{Command: "rewards retry", Target: "failed", New: "3"},
		Operator: "ops", Host: "h", AtMs: 1}}, 24*time.Hour)
	want = "1970-01-01T00:00:00.001Z\tops@h\t(none)\trewards retry\tfailed\t(none) -> 3\n1 changes in the last 24h0m0s\n"
	if b.String() != want {
		t.Errorf("admin-log:\n%q\nwant\n%q", b.String(), want)
	}
}

// The total row sums the hours and recomputes payout ppm from the coins.
func TestPrintRoomHours(t *testing.T) {
	var b strings.Builder
	err := luckyctl.PrintRoomHours(&b, []statsapi.LuckyRoomHour{
		{HourStartMs: 0, Draws: 2, Hits: 1, CoinsIn: 100, CoinsOut: 50, PayoutPPM: 500_000},
		{HourStartMs: 3_600_000, Draws: 1, CoinsIn: 100, CoinsOut: 100, PayoutPPM: 1_000_000, Rejections: 1, RejectedCoins: 10},
	})
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if err != nil || len(lines) != 4 {
		t.Fatalf("%v:\n%s", err, b.String())
	}
	if got := strings.Fields(lines[3]); strings.Join(got, " ") != "total, 2 hours 3 1 200 150 750000 1 10" {
		t.Errorf("total row %q", lines[3])
	}
	if !strings.HasPrefix(strings.TrimSpace(lines[1]), "1970-01-01 00:00") {
		t.Errorf("first hour %q", lines[1])
	}
}

// The total row's payout ppm is exact past coins_out × 10^6 overflowing
// int64 (rooms that paid 9.2·10^12 coins, migration 0016), and clamped to
// BIGINT's top as the column is. Before, the product wrapped: the total of
// a room paying what it took in read -844674 ppm.
func TestPrintRoomHoursLargeTotals(t *testing.T) {
	for _, tc := range []struct {
		in, out int64
		want    string
	}{
		{10_000_000_000_000, 10_000_000_000_000, "1000000"},
		{1, 10_000_000_000_000, "9223372036854775807"},
	} {
		var b strings.Builder
		if err := luckyctl.PrintRoomHours(&b, []statsapi.LuckyRoomHour{{CoinsIn: tc.in, CoinsOut: tc.out}}); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(b.String()), "\n")
		if got := strings.Fields(lines[len(lines)-1]); got[7] != tc.want {
			t.Errorf("coins in %d, out %d: total payout ppm %s, want %s", tc.in, tc.out, got[7], tc.want)
		}
	}
}
