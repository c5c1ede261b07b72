package command

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/hyapp/roomflow/internal/cli"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/services/luckydraw/wallet/walletfake"
)

const luckyRuleYAML = `gift_id: lucky-star
rule_version: v1
gift_price: 100
pool_rate_ppm: 100000
platform_weight_ppm: 200000
room_weight_ppm: 300000
target_payout_rate_ppm: 500000
max_single_payout: 100000
status: active
effective_at_ms: 1
tiers:
  - {tier_id: none, reward_type: none, probability_ppm: 500000}
  - {tier_id: small_1x, reward_type: multiplier, reward_value: 1, probability_ppm: 500000}
`

// TestLuckyCommands drives `roomflow lucky` and its admin subcommands on
// one database: a rule published from YAML (and refused when edited), pools
// funded, the service serving draws over gRPC (hits credited by the fake
// wallet before the answer, every lucky event on Kafka), a switch override seen by
// the running service, and audit passing on the draws and failing on a
// tampered one or an unknown draw id.
func TestLuckyCommands(t *testing.T) {
	m := testenv.NewMySQL(t)
	k := testenv.NewKafka(t)
	w, err := walletfake.Listen(walletfake.Config{Seed: 1}, "")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	addr := testenv.ClosedAddr(t)
	// No drain delay: the stop's own length is measured (TestDrainDelay has the delay).
	cfg := "mysql:\n  dsn: \"" + m.DSN + "\"\nlog:\n  level: error\nmetrics:\n  addr: \"\"\napi:\n  addr: \"\"\n  app_addr: \"\"\n  grpc_addr: \"\"\n" +
		"shutdown:\n  drain_delay: 0s\n" +
		"lucky:\n  grpc_addr: \"" + addr + "\"\n  audit_key: test-audit-key\n  wallet_grpc_addr: \"" + w.Addr() + "\"\n" +
		"  outbox_poll_interval: 50ms\n" + k.ConfigYAML(3)
	rules := filepath.Join(t.TempDir(), "rule.yaml")
	if err := os.WriteFile(rules, []byte(luckyRuleYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := runCLI(t, cfg, "lucky", "rules", "publish", rules); err != nil || !strings.Contains(out, "rules publish lucky-star/v1: (none) -> active") {
		t.Fatalf("rules publish: %v %s", err, out)
	}
	edited := filepath.Join(t.TempDir(), "edited.yaml")
	os.WriteFile(edited, []byte(strings.Replace(luckyRuleYAML, "pool_rate_ppm: 100000", "pool_rate_ppm: 200000", 1)), 0o600)
	if _, err := runCLI(t, cfg, "lucky", "rules", "publish", edited); err == nil {
		t.Fatal("an edit of a published version must be refused")
	}
	for _, scope := range [][2]string{{"platform", "global"}, {"room", "r1"}, {"gift", "lucky-star"}} {
		if out, err := runCLI(t, cfg, "lucky", "pools", "fund", "--scope-type", scope[0], "--scope-id", scope[1], "--amount", "1000000", "--reserve-floor", "10"); err != nil {
			t.Fatalf("pools fund %v: %v %s", scope, err, out)
		}
	}
	var funded int64
	m.DB.QueryRow(`SELECT SUM(funded) FROM lucky_pools WHERE reserve_floor = 10`).Scan(&funded)
	if funded != 3_000_000 {
		t.Fatalf("funded = %d, want 3000000", funded)
	}

	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { _, err := runCLIContext(t, ctx, cfg, "lucky", "--instance-id", "lucky-0"); served <- err }()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := activityv1.NewLuckyGiftServiceClient(conn)
	check := func() *activityv1.CheckLuckyGiftResponse {
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		r, err := client.CheckLuckyGift(c, &activityv1.CheckLuckyGiftRequest{Meta: &activityv1.LuckyGiftMeta{RoomId: "r1"}, GiftId: "lucky-star"})
		if err != nil {
			return nil
		}
		return r
	}
	testenv.Eventually(t, 20*time.Second, "lucky serving", func() bool { r := check(); return r != nil && r.Enabled && r.RuleVersion == "v1" })
	var owner string
	m.DB.QueryRow(`SELECT instance_id FROM lucky_pool_owner WHERE id = 1`).Scan(&owner)
	if owner != "lucky-0" {
		t.Fatalf("lucky_pool_owner.instance_id = %q, want lucky-0", owner)
	}
	var drawIDs []string
	hits := 0
	for i := range 20 {
		r, err := client.ExecuteLuckyGiftDraw(ctx, &activityv1.ExecuteLuckyGiftDrawRequest{
			Meta:   &activityv1.LuckyGiftMeta{CommandId: fmt.Sprint("cmd-", i), RoomId: "r1", SenderUserId: int64(100 + i)},
			GiftId: "lucky-star", GiftCount: 1, CoinSpent: 100, HeatValue: 100,
		})
		if err != nil || r.DrawId == "" {
			t.Fatalf("draw %d: %v %v", i, r, err)
		}
		if want := map[bool]string{true: "GRANTED", false: "NONE"}[r.Hit]; r.RewardStatus != want || r.Hit != (r.CreditReceiptId != "") {
			t.Fatalf("draw %d: hit %v answered %s (receipt %q), want %s with a receipt for hits", i, r.Hit, r.RewardStatus, r.CreditReceiptId, want)
		}
		if r.Hit {
			hits++
		}
		drawIDs = append(drawIDs, r.DrawId)
	}
	if hits == 0 || len(w.Ledger()) != hits {
		t.Fatalf("%d hits, %d wallet credits: every hit is credited once (and some must hit at 50%%)", hits, len(w.Ledger()))
	}
	// Every draw's events reach kafka.topics.lucky_events through the outbox
	// worker: LuckyGiftDrawn per draw, LuckyPoolChanged per layer, and
	// LuckyRewardGranted per hit.
	testenv.Eventually(t, 20*time.Second, "lucky events on Kafka", func() bool {
		var pending int
		m.DB.QueryRow(`SELECT COUNT(*) FROM lucky_outbox WHERE status <> 'done'`).Scan(&pending)
		return pending == 0
	})
	types := map[string]int{}
	for _, r := range k.DrainCommitted(t, k.Config.Topics.LuckyEvents) {
		for _, h := range r.Headers {
			if h.Key == "event_type" {
				types[string(h.Value)]++
			}
		}
	}
	if types["LuckyGiftDrawn"] != 20 || types["LuckyPoolChanged"] != 60 || types["LuckyRewardGranted"] != hits {
		t.Fatalf("lucky events by type %v; want 20 drawn, 60 pool changes, %d granted", types, hits)
	}
	// loadgen --lucky-addr draws its lucky gifts through the running
	// service before writing them (--live: right before each transaction):
	// one draw per lucky gift, named by the gift rows.
	gifts := 0
	for _, run := range [][]string{
		{"--id-prefix", "lgl"},
		{"--id-prefix", "lgv", "--live", "--span", "2s", "--abandoned", "0"},
		{"--id-prefix", "lgd", "--duration", "2s", "--rate", "60"},
		{"--id-prefix", "lgk", "--duration", "2s", "--rate", "60", "--to", "kafka"},
	} {
		// Short mic timers keep the live sessions (and so the run) short.
		out, err := runCLI(t, cfg+"mic:\n  pending_publish_max_age: 2s\n  publishing_session_max_age: 3s\n",
			append([]string{"loadgen", "--lucky-addr", addr, "--sessions", "5", "--gifts", "60", "--rooms", "3"}, run...)...)
		if err != nil || !strings.Contains(out, "rejected map[]") {
			t.Fatalf("loadgen --lucky-addr %v: %v\n%s", run, err, out)
		}
		var drawn, named int
		m.DB.QueryRow(`SELECT COUNT(*) FROM lucky_draw_records WHERE command_id LIKE ?`, run[1]+"-gift-%").Scan(&drawn)
		m.DB.QueryRow(`SELECT COUNT(*) FROM lucky_draw_records d JOIN room_outbox o ON o.event_id = d.command_id WHERE d.command_id LIKE ?`, run[1]+"-gift-%").Scan(&named)
		if slices.Contains(run, "kafka") {
			named = drawn // its gifts went to the topic, not room_outbox
		}
		if drawn == 0 || named != drawn || !strings.Contains(out, fmt.Sprintf("drew %d lucky gifts", drawn)) {
			t.Fatalf("loadgen %v drew %d lucky gifts, %d of them written to room_outbox:\n%s", run, drawn, named, out)
		}
		gifts += drawn
	}
	if out, err := runCLI(t, cfg, "lucky", "switch", "global_lucky_gift_enabled", "off"); err != nil {
		t.Fatalf("switch: %v %s", err, out)
	}
	testenv.Eventually(t, 3*time.Second, "the override reaching the service", func() bool {
		r := check()
		return r != nil && !r.Enabled && r.RejectReason == "global_disabled"
	})
	if _, err := runCLI(t, cfg, "lucky", "switch", "global_lucky_gift_enabled", "default"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 3*time.Second, "the default back", func() bool { r := check(); return r != nil && r.Enabled })
	stopAt := time.Now()
	cancel()
	if err := <-served; err != nil {
		t.Fatalf("lucky must stop cleanly: %v", err)
	}
	if d := time.Since(stopAt); d > 5*time.Second {
		t.Fatalf("lucky took %s to stop", d)
	}

	if out, err := runCLI(t, cfg, "lucky", "audit", "--since", "1h"); err != nil || !strings.Contains(out, fmt.Sprintf("audited %d draws: %d match, 0 differ", 20+gifts, 20+gifts)) {
		t.Fatalf("audit: %v %s", err, out)
	}
	m.DB.Exec(`UPDATE lucky_draw_records SET random_value = (random_value + 1) % 1000000 WHERE draw_id = ?`, drawIDs[3])
	out, err := runCLI(t, cfg, "lucky", "audit", "--draw-id", drawIDs[3])
	if err == nil || !strings.Contains(out, "MISMATCH "+drawIDs[3]) {
		t.Fatalf("a tampered draw must fail the audit: %v %s", err, out)
	}
	if _, err := runCLI(t, cfg, "lucky", "audit", "--draw-id", "LD-unknown"); err == nil {
		t.Fatal("an unknown draw must fail the audit")
	}
	if _, err := runCLI(t, strings.Replace(cfg, "audit_key: test-audit-key", "audit_key: \"\"", 1), "lucky"); err == nil || !strings.Contains(err.Error(), "lucky.audit_key") {
		t.Fatalf("lucky without an audit key must name lucky.audit_key: %v", err)
	}
}

// TestLuckyServesWithoutWalletOrKafka: with the wallet and Kafka both
// unreachable, `roomflow lucky` still starts, answers checks and draws
// (every hit PENDING once the wallet call times out, its credit and events
// left in lucky_outbox), and stops cleanly.
func TestLuckyServesWithoutWalletOrKafka(t *testing.T) {
	m := testenv.NewMySQL(t)
	addr := testenv.ClosedAddr(t)
	// No drain delay: the stop's own length is measured.
	cfg := "mysql:\n  dsn: \"" + m.DSN + "\"\nlog:\n  level: error\nmetrics:\n  addr: \"\"\napi:\n  addr: \"\"\n  app_addr: \"\"\n  grpc_addr: \"\"\n" +
		"shutdown:\n  drain_delay: 0s\n" +
		"kafka:\n  brokers: [\"" + testenv.ClosedAddr(t) + "\"]\n" +
		"lucky:\n  grpc_addr: \"" + addr + "\"\n  audit_key: k\n  wallet_grpc_addr: \"" + testenv.ClosedAddr(t) + "\"\n  wallet_credit_timeout: 100ms\n"
	rules := filepath.Join(t.TempDir(), "rule.yaml")
	// Every draw hits (its target follows: 1,000,000 ppm).
	os.WriteFile(rules, []byte(strings.NewReplacer("probability_ppm: 500000}", "probability_ppm: 0}", "reward_value: 1, probability_ppm: 500000",
		"reward_value: 1, probability_ppm: 1000000", "target_payout_rate_ppm: 500000", "target_payout_rate_ppm: 1000000").Replace(luckyRuleYAML)), 0o600)
	if out, err := runCLI(t, cfg, "lucky", "rules", "publish", rules); err != nil {
		t.Fatalf("rules publish: %v %s", err, out)
	}
	for _, scope := range [][2]string{{"platform", "global"}, {"room", "r1"}, {"gift", "lucky-star"}} {
		if out, err := runCLI(t, cfg, "lucky", "pools", "fund", "--scope-type", scope[0], "--scope-id", scope[1], "--amount", "1000000"); err != nil {
			t.Fatalf("pools fund %v: %v %s", scope, err, out)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { _, err := runCLIContext(t, ctx, cfg, "lucky"); served <- err }()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := activityv1.NewLuckyGiftServiceClient(conn)
	testenv.Eventually(t, 20*time.Second, "lucky serving", func() bool {
		r, err := client.CheckLuckyGift(ctx, &activityv1.CheckLuckyGiftRequest{Meta: &activityv1.LuckyGiftMeta{RoomId: "r1"}, GiftId: "lucky-star"})
		return err == nil && r.Enabled
	})
	for i := range 3 {
		r, err := client.ExecuteLuckyGiftDraw(ctx, &activityv1.ExecuteLuckyGiftDrawRequest{
			Meta:   &activityv1.LuckyGiftMeta{CommandId: fmt.Sprint("nw-", i), RoomId: "r1", SenderUserId: 7},
			GiftId: "lucky-star", GiftCount: 1, CoinSpent: 100, HeatValue: 100,
		})
		if err != nil || !r.Hit || r.RewardStatus != "PENDING" || r.CreditReceiptId != "" {
			t.Fatalf("draw %d without a wallet: %v %v, want a PENDING hit", i, r, err)
		}
	}
	var pending int
	m.DB.QueryRow(`SELECT COUNT(*) FROM lucky_outbox WHERE status <> 'done'`).Scan(&pending)
	if pending < 3*5 { // per draw: its credit, LuckyGiftDrawn and 3 LuckyPoolChanged
		t.Fatalf("%d lucky_outbox rows waiting, want every credit and event kept", pending)
	}
	stopAt := time.Now()
	cancel()
	if err := <-served; err != nil || time.Since(stopAt) > 10*time.Second {
		t.Fatalf("lucky must stop cleanly with Kafka down: %v after %s", err, time.Since(stopAt))
	}
}

// TestLuckyAdminCommands drives the operator commands on MySQL alone:
// `rules show`, what `rules status` says, the admin trail, and bad input:
// usage mistakes exit 2 naming the argument, unknown gifts and versions
// exit 1, and neither writes anything, to the trail neither.
func TestLuckyAdminCommands(t *testing.T) {
	m := testenv.NewMySQL(t)
	cfg := "mysql:\n  dsn: \"" + m.DSN + "\"\nlog:\n  level: error\nmetrics:\n  addr: \"\"\n"
	dir := t.TempDir()
	for _, v := range []string{"v1", "v2"} {
		p := filepath.Join(dir, v+".yaml")
		os.WriteFile(p, []byte(strings.Replace(strings.Replace(luckyRuleYAML, "rule_version: v1", "rule_version: "+v, 1),
			"effective_at_ms: 1\n", "", 1)), 0o600)
		if out, err := runCLI(t, cfg, "lucky", "rules", "publish", p); err != nil {
			t.Fatalf("publish %s: %v %s", v, err, out)
		}
	}
	out, err := runCLI(t, cfg, "lucky", "rules", "show", "lucky-star")
	if err != nil || !strings.Contains(out, "lucky-star/v2\tactive") || !strings.Contains(out, "DRAWS") ||
		!strings.Contains(out, "lucky-star/v1\tactive") || !strings.Contains(out, "replaced by v2") {
		t.Fatalf("rules show: %v\n%s", err, out)
	}
	if out, err := runCLI(t, cfg, "lucky", "rules", "status", "lucky-star", "v2", "paused"); err != nil || !strings.Contains(out, "active -> paused") {
		t.Fatalf("pause: %v %s", err, out)
	}
	if out, _ := runCLI(t, cfg, "lucky", "rules", "show"); !strings.Contains(out, "gift is stopped") {
		t.Fatalf("rules show after the pause:\n%s", out)
	}
	if out, err := runCLI(t, cfg, "lucky", "rules", "status", "lucky-star", "v1", "active"); err != nil || !strings.Contains(out, "v1 does not draw: v2 decides") {
		t.Fatalf("activating the replaced v1 must say it does not draw: %v %s", err, out)
	}
	if out, err := runCLI(t, cfg, "lucky", "switch", "room_scope_paused", "on", "--room", "r7", "--operator", "alice"); err != nil || !strings.Contains(out, "default -> on") {
		t.Fatalf("switch --room: %v %s", err, out)
	}
	out, err = runCLI(t, cfg, "lucky", "admin-log", "--since", "1h")
	host, _ := os.Hostname()
	for _, want := range []string{"rules publish\tlucky-star/v1\t(none) -> active", "rules status\tlucky-star/v2\tactive -> paused",
		"rules status\tlucky-star/v1\t", "alice@" + host + "\t", "switch\troom_scope_paused r7\tdefault -> on", "5 changes in the last 1h0m0s"} {
		if err != nil || !strings.Contains(out, want) {
			t.Fatalf("admin-log: want %q: %v\n%s", want, err, out)
		}
	}
	var changed, logged int64
	m.DB.QueryRow(`SELECT MAX(updated_at_ms) FROM lucky_gift_rules`).Scan(&changed)
	m.DB.QueryRow(`SELECT COUNT(*) FROM lucky_admin_log`).Scan(&logged)
	for _, tc := range []struct {
		args   []string
		status int
		names  string
	}{
		{[]string{"switch", "global_lucky", "off"}, 2, `unknown switch "global_lucky"`},
		{[]string{"switch", "global_lucky_gift_enabled", "maybe"}, 2, "on, off or default"},
		{[]string{"switch", "room_scope_paused", "on"}, 2, "--room"},
		{[]string{"switch", "room_scope_paused", "on", "--room", strings.Repeat("r", 65)}, 2, "--room"},
		{[]string{"rules", "status", "lucky-star", "v1", "stopped"}, 2, "draft, active, paused or retired"},
		{[]string{"switch", "global_lucky_gift_enabled", "off", "--wait", "500ms"}, 2, "--wait"},
		{[]string{"rules", "status", "lucky-star", "v9", "paused"}, 1, `version "v9"`},
		{[]string{"rules", "status", "tulip", "v1", "paused"}, 1, `gift "tulip"`},
		{[]string{"rules", "show", "tulip"}, 1, `gift "tulip"`},
		{[]string{"admin-log", "--since", "yesterday"}, 2, "--since"},
		{[]string{"pools", "fund", "--scope-type", "house", "--amount", "5"}, 2, "--scope-type"},
		{[]string{"pools", "fund", "--scope-type", "room", "--scope-id", strings.Repeat("r", 65), "--amount", "5"}, 2, "--scope-id"},
		{[]string{"pools", "fund", "--amount", "-5"}, 2, "--amount"},
		{[]string{"admin-log", "--since", "-1h"}, 2, "--since"},
		{[]string{"switch", "global_lucky_gift_enabled", "off", "--operator", strings.Repeat("o", 65)}, 2, "--operator"},
	} {
		out, err := runCLI(t, cfg, append([]string{"lucky"}, tc.args...)...)
		if err == nil || cli.ExitCode(err) != tc.status || !strings.Contains(err.Error(), tc.names) {
			t.Errorf("lucky %v: exit %d (%v), want %d naming %q\n%s", tc.args, cli.ExitCode(err), err, tc.status, tc.names, out)
		}
	}
	bad := cfg + "lucky:\n  replaced_version_grace: 6m\n"
	if _, err := runCLI(t, bad, "lucky", "rules", "status", "lucky-star", "v2", "active"); err == nil || cli.ExitCode(err) != 2 || !strings.Contains(err.Error(), "lucky.replaced_version_grace") {
		t.Errorf("a grace over 5m: %v", err)
	}
	var after, overrides, loggedAfter, pools int64
	m.DB.QueryRow(`SELECT MAX(updated_at_ms) FROM lucky_gift_rules`).Scan(&after)
	m.DB.QueryRow(`SELECT COUNT(*) FROM lucky_switches`).Scan(&overrides)
	m.DB.QueryRow(`SELECT COUNT(*) FROM lucky_admin_log`).Scan(&loggedAfter)
	m.DB.QueryRow(`SELECT COUNT(*) FROM lucky_pools`).Scan(&pools)
	if after != changed || overrides != 1 || loggedAfter != logged || pools != 0 {
		t.Fatalf("bad input wrote: rules updated at %d (was %d), %d switch overrides (want r7's), %d admin log rows (was %d), %d pools",
			after, changed, overrides, loggedAfter, logged, pools)
	}
}

// lucky stats prints a room's hours of the window, oldest first, with a
// total; a malformed room or --since is a usage error (exit 2).
func TestLuckyStatsCommand(t *testing.T) {
	m := testenv.NewMySQL(t)
	cfg := "mysql:\n  dsn: \"" + m.DSN + "\"\nlog:\n  level: error\n"
	h := time.Now().Add(-3 * time.Hour).Truncate(time.Hour).UnixMilli()
	for i, r := range [][4]int64{{h, 10, 1000, 400}, {h + 3_600_000, 5, 500, 1600}, {h - 40*3_600_000, 99, 99, 99}} {
		// The third hour is 40 hours old: outside --since 24h.
		if _, err := m.DB.Exec(`INSERT INTO lucky_room_stats_hourly (app_code, room_id, hour_start_ms, draws, hits, coins_in, coins_out, rejections, rejected_coins)
			VALUES ('hyapp', 'r1', ?, ?, 1, ?, ?, ?, ?)`, r[0], r[1], r[2], r[3], i, 100*i); err != nil {
			t.Fatal(err)
		}
	}
	out, err := runCLI(t, cfg, "lucky", "stats", "--room", "r1", "--since", "24h")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	first := time.UnixMilli(h).UTC().Format("2006-01-02 15:04")
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(regexp.QuoteMeta(first) + `\s+10\s+1\s+1000\s+400\s+400000\s+0\s+0`),
		regexp.MustCompile(`total, 2 hours\s+15\s+2\s+1500\s+2000\s+1333333\s+1\s+100`),
	} {
		if !want.MatchString(out) {
			t.Errorf("no %s in\n%s", want, out)
		}
	}
	for _, args := range [][]string{{"--room", strings.Repeat("r", 65)}, {"--room", ""}, {"--room", "r1", "--since", "-1h"}} {
		_, err := runCLI(t, cfg, append([]string{"lucky", "stats"}, args...)...)
		if cli.ExitCode(err) != 2 {
			t.Errorf("lucky stats %v: %v (exit %d), want a usage error", args, err, cli.ExitCode(err))
		}
	}
}
