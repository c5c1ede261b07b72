package deploy

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// grafanaDashboard is the part of a Grafana dashboard JSON the tests read.
type grafanaDashboard struct {
	UID           string `json:"uid"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query string `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []grafanaPanel `json:"panels"`
}

type grafanaPanel struct {
	ID         int            `json:"id"`
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Datasource *grafanaSource `json:"datasource"`
	Panels     []grafanaPanel `json:"panels"` // a collapsed row's
	Targets    []struct {
		Datasource *grafanaSource `json:"datasource"`
		Expr       string         `json:"expr"`
		RefID      string         `json:"refId"`
	} `json:"targets"`
}

type grafanaSource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

func loadDashboard(t *testing.T) grafanaDashboard {
	t.Helper()
	raw, err := os.ReadFile("grafana/roomflow.json")
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("roomflow.json: %v", err)
	}
	return d
}

// flatten lists every panel, those inside rows included.
func flatten(ps []grafanaPanel) []grafanaPanel {
	var out []grafanaPanel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, flatten(p.Panels)...)
	}
	return out
}

// grafanaVars are the built-in variables the queries may use, replaced by
// a value of their kind before the query is parsed.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

// The dashboard is importable (a Prometheus data source variable every
// query uses, unique panel ids) and has a row per concern.
func TestDashboardShape(t *testing.T) {
	d := loadDashboard(t)
	if d.UID == "" || d.SchemaVersion < 36 {
		t.Errorf("uid %q, schemaVersion %d: want a uid and a current schema", d.UID, d.SchemaVersion)
	}
	if len(d.Templating.List) == 0 || d.Templating.List[0].Type != "datasource" || d.Templating.List[0].Query != "prometheus" {
		t.Fatalf("the first variable must be the Prometheus data source: %+v", d.Templating.List)
	}
	uid := "${" + d.Templating.List[0].Name + "}"
	ids := map[int]bool{}
	var rows []string
	queries := 0
	for _, p := range flatten(d.Panels) {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			rows = append(rows, p.Title)
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != uid || len(p.Targets) == 0 {
			t.Errorf("panel %q: data source %+v, %d queries: want %s and a query", p.Title, p.Datasource, len(p.Targets), uid)
		}
		for _, q := range p.Targets {
			queries++
			if q.Datasource == nil || q.Datasource.UID != uid {
				t.Errorf("panel %q query %s: data source %+v, want %s", p.Title, q.RefID, q.Datasource, uid)
			}
		}
	}
	for _, want := range []string{"Throughput per stage", "End-to-end lag", "Relay gaps and leadership", "Dead letters",
		"Transactions and restores", "MySQL sink", "Tencent IM", "Mic sessions", "Lucky draws"} {
		if !slices.Contains(rows, want) {
			t.Errorf("no row %q (rows: %q)", want, rows)
		}
	}
	if queries < 20 {
		t.Errorf("%d queries", queries)
	}
}

// Every dashboard query parses with Prometheus' parser and names only
// metrics, labels and label values a running roomflow emits (the same
// pipeline run as the alert rules' test).
func TestDashboardNamesEmittedMetrics(t *testing.T) {
	d := loadDashboard(t)
	e := pipelineMetrics(t)
	leftover := regexp.MustCompile(`\$\w+|\$\{`)
	for _, p := range flatten(d.Panels) {
		for _, q := range p.Targets {
			expr := grafanaVars.Replace(q.Expr)
			if v := leftover.FindString(expr); v != "" {
				t.Errorf("panel %q query %s: uses %s, a variable the dashboard does not define", p.Title, q.RefID, v)
				continue
			}
			for _, err := range checkQuery(e, expr) {
				t.Errorf("panel %q query %s: %v", p.Title, q.RefID, err)
			}
		}
	}
}
