package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/sinks/tencentim"
)

// The Kubernetes manifests must stay true to the binary: the ConfigMap's
// config validates, and every container runs a subcommand that exists.
func TestDeployManifests(t *testing.T) {
	files, _ := filepath.Glob("../../deploy/kubernetes/*.yaml")
	if len(files) < 5 {
		t.Fatalf("manifests missing: %v", files)
	}
	commands := map[string]bool{}
	for _, c := range newRoot().Commands() {
		commands[c.Name()] = true
	}
	secretEnv := map[string]string{}
	var configs []string
	var containers int
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
					if len(c.Args) == 0 || !commands[c.Args[0]] {
						t.Errorf("%s: container %s runs %v, not a roomflow subcommand", f, c.Name, c.Args)
					}
				}
			}
		}
	}
	if len(configs) != 1 || containers < 5 {
		t.Fatalf("want one ConfigMap and the component containers, got %d configs, %d containers", len(configs), containers)
	}
	p := filepath.Join(t.TempDir(), "roomflow.yaml")
	os.WriteFile(p, []byte(configs[0]), 0o600)
	cfg, err := config.Load(p, func(k string) string { return secretEnv[k] })
	if err != nil {
		t.Fatalf("the ConfigMap's config does not validate: %v", err)
	}
	if err := cfg.ValidateIM(); err != nil {
		t.Fatalf("the example Secret must satisfy publish-im: %v", err)
	}
}

type podSpec struct {
	InitContainers []container `yaml:"initContainers"`
	Containers     []container `yaml:"containers"`
}

type container struct {
	Name string   `yaml:"name"`
	Args []string `yaml:"args"`
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
