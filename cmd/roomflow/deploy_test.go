package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/hyapp/roomflow/internal/app"
	"github.com/hyapp/roomflow/internal/config"
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
