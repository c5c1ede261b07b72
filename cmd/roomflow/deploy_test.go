package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/hyapp/roomflow/internal/app"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/sinks/mysql/luckystats"
	"github.com/hyapp/roomflow/sinks/tencentim"
)

// The Kubernetes manifests must stay true to the binary: the ConfigMap's
// config validates, every container runs a subcommand that exists with
// flags it accepts, and every Deployment's container is a static group
// member named after its pod (--instance-id from the downward API), so a
// container restarted after a crash takes its partitions straight back.
func TestDeployManifests(t *testing.T) {
	files, _ := filepath.Glob("../../deploy/kubernetes/*.yaml")
	if len(files) < 5 {
		t.Fatalf("manifests missing: %v", files)
	}
	commands := map[string]*cobra.Command{}
	for _, c := range newRoot().Commands() {
		commands[c.Name()] = c
	}
	secretEnv := map[string]string{}
	var configs []string
	var containers, deployments int
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(raw))
		for {
			var doc struct {
				APIVersion string `yaml:"apiVersion"`
				Kind       string `yaml:"kind"`
				Metadata   struct {
					Name string `yaml:"name"`
				} `yaml:"metadata"`
				Data       map[string]string `yaml:"data"`
				StringData map[string]string `yaml:"stringData"`
				Spec       struct {
					Template struct {
						Spec podSpec `yaml:"spec"`
					} `yaml:"template"`
				} `yaml:"spec"`
			}
			if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if doc.APIVersion == "" || doc.Kind == "" {
				t.Fatalf("%s: apiVersion and kind required", f)
			}
			switch doc.Kind {
			case "ConfigMap":
				configs = append(configs, doc.Data["roomflow.yaml"])
			case "Secret":
				for k, v := range doc.StringData {
					secretEnv[k] = v
				}
			case "Deployment", "Job":
				ps := doc.Spec.Template.Spec
				for _, c := range append(ps.InitContainers, ps.Containers...) {
					containers++
					if len(c.Args) == 0 || commands[c.Args[0]] == nil {
						t.Errorf("%s: container %s runs %v, not a roomflow subcommand", f, c.Name, c.Args)
						continue
					}
					if err := commands[c.Args[0]].ParseFlags(c.Args[1:]); err != nil {
						t.Errorf("%s: container %s: %v", f, c.Name, err)
					}
					if doc.Kind == "Deployment" {
						deployments++
						checkInstanceID(t, f, c)
					}
				}
			}
		}
	}
	if len(configs) != 1 || containers < 5 || deployments < 4 {
		t.Fatalf("want one ConfigMap and the component containers, got %d configs, %d containers, %d in Deployments", len(configs), containers, deployments)
	}
	p := filepath.Join(t.TempDir(), "roomflow.yaml")
	os.WriteFile(p, []byte(configs[0]), 0o600)
	cfg, err := config.Load(p, func(k string) string { return secretEnv[k] })
	if err != nil {
		t.Fatalf("the ConfigMap's config does not validate: %v", err)
	}
	if _, err := imPublisherConfig(&app.Deps{Config: cfg}, ""); err != nil {
		t.Fatalf("the ConfigMap's config and the example Secret must satisfy publish-im: %v", err)
	}
}

type podSpec struct {
	InitContainers []container `yaml:"initContainers"`
	Containers     []container `yaml:"containers"`
}

type container struct {
	Name string   `yaml:"name"`
	Args []string `yaml:"args"`
	Env  []struct {
		Name      string `yaml:"name"`
		ValueFrom struct {
			FieldRef struct {
				FieldPath string `yaml:"fieldPath"`
			} `yaml:"fieldRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
}

// checkInstanceID requires c to pass --instance-id $(VAR) with VAR taken
// from the pod's metadata.name (Kubernetes expands $(VAR) in args).
func checkInstanceID(t *testing.T, file string, c container) {
	t.Helper()
	i := slices.Index(c.Args, "--instance-id")
	if i < 0 || i+1 >= len(c.Args) {
		t.Errorf("%s: container %s passes no --instance-id: a restart would wait for the session timeout", file, c.Name)
		return
	}
	v := c.Args[i+1]
	if !strings.HasPrefix(v, "$(") || !strings.HasSuffix(v, ")") {
		t.Errorf("%s: container %s: --instance-id %q is not the pod name from the environment", file, c.Name, v)
		return
	}
	for _, e := range c.Env {
		if e.Name == v[2:len(v)-1] && e.ValueFrom.FieldRef.FieldPath == "metadata.name" {
			return
		}
	}
	t.Errorf("%s: container %s: %s is not the downward API's metadata.name", file, c.Name, v)
}

// The alert rules filter roomflow_im_publish_total only by result values
// the IM client emits ("delivered" is not one: the failure alert fired on
// every successful call).
func TestAlertRulesUseEmittedIMResults(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/prometheus-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	emitted := map[string]bool{"ok": true}
	for _, c := range []tencentim.Class{tencentim.Retryable, tencentim.RegenerateSig, tencentim.Permanent} {
		emitted[c.String()] = true
	}
	uses := regexp.MustCompile(`roomflow_im_publish_total\{[^}]*result!?=~?"([^"]+)"`).FindAllStringSubmatch(string(raw), -1)
	if len(uses) == 0 {
		t.Fatal("no rule on roomflow_im_publish_total{result}")
	}
	for _, u := range uses {
		if !emitted[u[1]] {
			t.Errorf("rule filters result=%q, which the IM client never emits (it emits %v)", u[1], emitted)
		}
	}
}

// The lucky alerts exist, and the payout alert reads only gauges the
// payout collector exports (a renamed gauge would leave the alert silent
// for ever). roomflow_lucky_reward_failed_total is the draw service's.
func TestAlertRulesLucky(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/prometheus-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert, Expr, For string
			}
		}
	}
	if err := yaml.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	rules := map[string]struct{ Expr, For string }{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			rules[r.Alert] = struct{ Expr, For string }{r.Expr, r.For}
		}
	}
	c, err := luckystats.NewPayoutCollector(luckystats.PayoutCollectorConfig{AppCode: "hyapp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan *prometheus.Desc, 8)
	c.Describe(ch)
	close(ch)
	exported := map[string]bool{}
	for d := range ch {
		exported[regexp.MustCompile(`fqName: "([^"]+)"`).FindStringSubmatch(d.String())[1]] = true
	}
	payout, ok := rules["LuckyPayoutRateOutOfBand"]
	if !ok || payout.For != "15m" {
		t.Fatalf("LuckyPayoutRateOutOfBand missing or not for 15m: %+v", payout)
	}
	used := regexp.MustCompile(`roomflow_lucky_[a-z_]+`).FindAllString(payout.Expr, -1)
	for _, want := range []string{"roomflow_lucky_payout_rate_ppm", "roomflow_lucky_target_payout_rate_ppm", "roomflow_lucky_draws"} {
		if !slices.Contains(used, want) {
			t.Errorf("LuckyPayoutRateOutOfBand does not read %s: %s", want, payout.Expr)
		}
	}
	for _, m := range used {
		if !exported[m] {
			t.Errorf("LuckyPayoutRateOutOfBand reads %s, which the payout collector does not export (%v)", m, exported)
		}
	}
	if r, ok := rules["LuckyRewardFailed"]; !ok || !strings.Contains(r.Expr, "increase(roomflow_lucky_reward_failed_total[10m]) > 0") {
		t.Fatalf("LuckyRewardFailed missing or changed: %+v", r)
	}
}
