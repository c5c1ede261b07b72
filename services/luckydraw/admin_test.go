package luckydraw_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hyapp/roomflow/services/luckydraw"
)

// TestPausingTheDecidingVersionStopsTheGift: publish v1, publish v2,
// pause v2: no draw goes on under v1 (the bug of issue 31), named or not;
// re-activating v1 changes nothing that draws and says so; republishing
// v2's file after the pause is a no-op; the tidy-up retires v1.
func TestPausingTheDecidingVersionStopsTheGift(t *testing.T) {
	e := start(t, luckydraw.Config{}, 100_000)
	ctx := context.Background()
	a := testAdmin(t, e.db)
	v2 := rule("v2", 0)
	v2.EffectiveAtMs = time.Now().UnixMilli()
	if _, err := a.PublishRule(ctx, v2); err != nil {
		t.Fatal(err)
	}
	draw := func(cmd, version string) string {
		t.Helper()
		req := drawReq(cmd, 1)
		req.RuleVersion = version
		r, err := e.client.ExecuteLuckyGiftDraw(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if r.RejectReason == "" && r.RuleVersion != "v2" {
			t.Fatalf("%s drew under %s", cmd, r.RuleVersion)
		}
		return r.RejectReason
	}
	if r := draw("a1", ""); r != "" {
		t.Fatalf("v2 active: %s", r)
	}
	if c, err := a.SetRuleStatus(ctx, "rose", "v2", "paused"); err != nil || c.Old != "active" || c.New != "paused" {
		t.Fatalf("pause: %+v %v", c, err)
	}
	if r := draw("a2", ""); r != luckydraw.RejectNoActiveRule {
		t.Fatalf("unnamed draw with v2 paused: %q", r)
	}
	if r := draw("a3", "v1"); r != luckydraw.RejectRuleNotActive {
		t.Fatalf("draw naming v1 with v2 paused: %q", r)
	}
	c, err := a.SetRuleStatus(ctx, "rose", "v1", "active")
	if err != nil || !strings.Contains(c.Note, "does not draw") || !strings.Contains(c.Note, "v2 decides") {
		t.Fatalf("activating v1 under v2: %+v %v", c, err)
	}
	if r := draw("a4", "v1"); r != luckydraw.RejectRuleNotActive {
		t.Fatalf("v1 drew after its re-activation: %q", r)
	}
	// status and enabled are not content: the same file again is a no-op.
	v2.Status, v2.Tiers[1].Enabled = "active", false
	if cs, err := a.PublishRule(ctx, v2); err != nil || len(cs) != 1 || !strings.Contains(cs[0].Note, "nothing changed") {
		t.Fatalf("republish after a pause: %+v %v", cs, err)
	}
	vs, err := a.RuleVersions(ctx, "rose")
	if err != nil || len(vs) != 2 || vs[0].Version != "v2" || vs[0].Status != "paused" || vs[0].Draws ||
		!strings.Contains(vs[0].Why, "gift is stopped") || !strings.Contains(vs[1].Why, "replaced by v2") {
		t.Fatalf("rules show: %+v %v", vs, err)
	}
	if _, err := a.RuleVersions(ctx, "tulip"); err == nil {
		t.Fatal("rules show of an unknown gift")
	}
	cs, err := a.TidyRuleStatuses(ctx)
	if err != nil || len(cs) != 1 || cs[0].Target != "rose/v1" || cs[0].Old != "active" || cs[0].New != "retired" {
		t.Fatalf("tidy: %+v %v", cs, err)
	}
	if cs, err := a.TidyRuleStatuses(ctx); err != nil || len(cs) != 0 {
		t.Fatalf("second tidy: %+v %v", cs, err)
	}
	if _, err := a.SetRuleStatus(ctx, "rose", "v2", "active"); err != nil {
		t.Fatal(err)
	}
	if r := draw("a5", ""); r != "" {
		t.Fatalf("v2 resumed: %q", r)
	}
	// The trail: one row per change by operator "test", none for the
	// failed lookup of tulip.
	log, err := a.AdminLog(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var trail []string
	for _, l := range log {
		if l.Operator != "test" || l.Host == "" || l.AtMs == 0 {
			t.Fatalf("log entry %+v", l)
		}
		trail = append(trail, l.Command+" "+l.Target+" "+l.Old+">"+l.New)
	}
	want := []string{"rules publish rose/v1 >active", "pools fund platform/global >balance 100000, reserve_floor 100"}
	if len(trail) != 11 || !strings.HasPrefix(trail[0], want[0]) || trail[1] != want[1] ||
		trail[len(trail)-2] != "rules tidy rose/v1 active>retired" || trail[len(trail)-1] != "rules status rose/v2 paused>active" {
		t.Fatalf("admin log:\n%s", strings.Join(trail, "\n"))
	}
}

func TestAdminConfigValidate(t *testing.T) {
	for _, g := range []time.Duration{-time.Second, luckydraw.MaxReplacedVersionGrace + time.Second} {
		if _, err := luckydraw.NewAdmin(nil, luckydraw.AdminConfig{ReplacedVersionGrace: g}); err == nil || !strings.Contains(err.Error(), "replaced_version_grace") {
			t.Errorf("grace %s: %v", g, err)
		}
	}
	if err := (luckydraw.Config{AuditKey: "k", ReplacedVersionGrace: 6 * time.Minute}).Validate(); err == nil || !strings.Contains(err.Error(), "replaced_version_grace") {
		t.Errorf("service grace 6m: %v", err)
	}
}
