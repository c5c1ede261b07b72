package deploy

import (
	"log/slog"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
)

const rulesFile = "prometheus-rules.yaml"

// loadAlertRules parses the rules file with Prometheus' own rule loader (the
// one `promtool check rules` and the server use): unknown fields, bad
// durations, expressions or templates fail here.
func loadAlertRules(t *testing.T) []rulefmt.Rule {
	t.Helper()
	raw, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	rgs, errs := rulefmt.Parse(raw, false, model.UTF8Validation, promqlParser, slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatalf("%s: %v", rulesFile, errs)
	}
	var rules []rulefmt.Rule
	for _, g := range rgs.Groups {
		rules = append(rules, g.Rules...)
	}
	if len(rules) == 0 {
		t.Fatal("no rules")
	}
	return rules
}

// Every rule parses, carries a severity and a summary, and its runbook
// annotation is the repository's docs/runbook.md#<alert in lower case>,
// an anchor docs/runbook.md has: a "## <Alert>" section. (Until issue 33
// this checked README.md#<alert>: the runbook moved to docs/runbook.md
// and the link became absolute, so an alert page opens it from anywhere;
// deploy/kubernetes replaces the base with kustomization.yaml's
// runbook_base_url.)
func TestAlertRulesSeverityAndRunbook(t *testing.T) {
	const runbookBase = "https://github.com/hyapp/roomflow/blob/main/docs/runbook.md#"
	runbook, err := os.ReadFile("../docs/runbook.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^## (\w+)$`).FindAllStringSubmatch(string(runbook), -1) {
		anchors[strings.ToLower(m[1])] = true
	}
	for _, r := range loadAlertRules(t) {
		if !slices.Contains([]string{"critical", "warning", "info"}, r.Labels["severity"]) {
			t.Errorf("%s: severity %q, want critical, warning or info", r.Alert, r.Labels["severity"])
		}
		anchor := strings.ToLower(r.Alert)
		if !anchors[anchor] {
			t.Errorf("%s: docs/runbook.md has no section \"## %s\" (anchor #%s)", r.Alert, r.Alert, anchor)
		}
		if want := runbookBase + anchor; r.Annotations["runbook"] != want {
			t.Errorf("%s: runbook annotation %q, want %q", r.Alert, r.Annotations["runbook"], want)
		}
		if r.Annotations["summary"] == "" {
			t.Errorf("%s: no summary", r.Alert)
		}
	}
}

// Every metric an alert expression reads, every label it matches or
// aggregates by, and every label value it filters on is one a running
// roomflow registers and emits (see pipelineMetrics): a renamed metric,
// a label the series never had (`by (group)` on the processor lag) or a
// result code the code never emits would leave the alert silent for ever.
func TestAlertRulesNameEmittedMetrics(t *testing.T) {
	rules := loadAlertRules(t)
	e := pipelineMetrics(t)
	for _, r := range rules {
		for _, err := range checkQuery(e, r.Expr) {
			t.Errorf("%s: %v", r.Alert, err)
		}
	}
}

// The alerts the issue asked for exist and read what they must.
func TestAlertRulesCoverage(t *testing.T) {
	byName := map[string][]rulefmt.Rule{}
	for _, r := range loadAlertRules(t) {
		byName[r.Alert] = append(byName[r.Alert], r)
	}
	reads := func(alert, selector string) {
		t.Helper()
		rs := byName[alert]
		if len(rs) == 0 {
			t.Errorf("no alert %s", alert)
			return
		}
		for _, r := range rs {
			node, err := promqlParser.ParseExpr(r.Expr)
			if err != nil {
				t.Fatal(err)
			}
			for _, vs := range selectors(node) {
				if vs.String() == selector {
					return
				}
			}
		}
		t.Errorf("%s does not read %s", alert, selector)
	}
	// A relay with no pod has no series to sum: absent() fires then.
	reads("RoomflowRelayNoLeader", "roomflow_relay_is_leader")
	noLeader, _ := promqlParser.ParseExpr(byName["RoomflowRelayNoLeader"][0].Expr)
	absent := false
	parser.Inspect(noLeader, func(n parser.Node, _ []parser.Node) error {
		if c, ok := n.(*parser.Call); ok && c.Func.Name == "absent" {
			absent = true
		}
		return nil
	})
	if !absent {
		t.Error("RoomflowRelayNoLeader does not fire when roomflow_relay_is_leader is absent")
	}
	reads("RoomflowRelayLag", "roomflow_relay_lag_seconds")
	// Dead letters of every stage: the relay's, the processors', the sink's.
	reads("RoomflowDLQ", `roomflow_relay_events_total{result="dead_lettered"}`)
	reads("RoomflowDLQ", "roomflow_process_dlq_total")
	reads("RoomflowDLQ", "roomflow_sink_dlq_records_total")
	reads("RoomflowMicIncompleteEvents", `roomflow_mic_events_total{outcome="skipped",reason="incomplete_mic_event"}`)
	reads("RoomflowProcessorLag", "roomflow_process_consumer_lag_records")
	reads("LuckyPayoutRateOutOfBand", "roomflow_lucky_payout_rate_ppm")
	reads("LuckyPayoutRateOutOfBand", "roomflow_lucky_target_payout_rate_ppm")
	reads("LuckyPayoutRateOutOfBand", "roomflow_lucky_draws")
	reads("LuckyRewardFailed", "roomflow_lucky_reward_failed_total")
	reads("LuckyRewardPendingTooLong", "roomflow_lucky_reward_pending_oldest_seconds")
	reads("LuckyFairnessCommitmentMissing", "roomflow_lucky_fairness_next_day_committed")
	reads("LuckyEventBacklogOld", "roomflow_lucky_outbox_oldest_seconds")
	reads("LuckyWalletDispatchOff", `roomflow_lucky_switch_state{name="wallet_credit_dispatch"}`)
	reads("LuckyRejectionsAfterDebit", `roomflow_lucky_draw_rejects_total{rpc="ExecuteLuckyGiftDraw"}`)
	reads("LuckyConflictingCommand", `roomflow_lucky_draws_total{outcome="conflict"}`)
	reads("LuckyInvalidDrawRequest", `roomflow_lucky_draws_total{outcome="invalid"}`)
	reads("LuckyPilotRoomPayoutOutOfBand", "roomflow_lucky_pilot_room_coins_out_total")
	reads("LuckyPilotRoomPayoutOutOfBand", "roomflow_lucky_pilot_room_coins_in_total")
	reads("LuckyPilotRoomPayoutOutOfBand", "roomflow_lucky_pilot_room_draws_total")
	reads("RoomflowRPCInsecure", `roomflow_rpc_insecure{listener="lucky.grpc_addr"}`)
	reads("RoomflowRPCRefused", "roomflow_rpc_refused_total")
	if rs := byName["LuckyPayoutRateOutOfBand"]; len(rs) == 1 && time.Duration(rs[0].For) != 15*time.Minute {
		t.Errorf("LuckyPayoutRateOutOfBand for %s, want 15m (a version needs a window of draws)", rs[0].For)
	}
}

// deploy/kubernetes/prometheusrule.yaml is the rules file as a
// PrometheusRule: its spec.groups decode to exactly the rules file's
// groups.
func TestPrometheusRuleMatchesRules(t *testing.T) {
	decode := func(path string, v any) {
		t.Helper()
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(raw, v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	var rules struct {
		Groups any `yaml:"groups"`
	}
	decode(rulesFile, &rules)
	var pr struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Metadata   struct {
			Name string `yaml:"name"`
		} `yaml:"metadata"`
		Spec struct {
			Groups any `yaml:"groups"`
		} `yaml:"spec"`
	}
	decode("kubernetes/prometheusrule.yaml", &pr)
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" || pr.Metadata.Name == "" {
		t.Fatalf("not a named monitoring.coreos.com/v1 PrometheusRule: %s %s %q", pr.APIVersion, pr.Kind, pr.Metadata.Name)
	}
	if rules.Groups == nil || !reflect.DeepEqual(rules.Groups, pr.Spec.Groups) {
		t.Fatalf("prometheusrule.yaml spec.groups differ from %s: edit both together", rulesFile)
	}
	kust, err := os.ReadFile("kubernetes/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(kust), "- prometheusrule.yaml") {
		t.Error("kustomization.yaml does not list prometheusrule.yaml")
	}
}
