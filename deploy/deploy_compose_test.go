package deploy

import (
	"context"
	"fmt"
	"go/build"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/hyapp/roomflow/cmd/roomflow/command"
	"github.com/hyapp/roomflow/internal/app"
	"github.com/hyapp/roomflow/internal/config"
)

// composeDashboard is the Grafana dashboard the compose stack provisions;
// the alerts work adds it, so until then it is the one bind mount whose
// source may be missing.
const composeDashboard = "grafana/roomflow.json"

// deploy/docker-compose.yml cannot run here (no container engine), so it
// is held to the binary instead: it loads with the compose specification's
// own loader; every roomflow service runs a subcommand that exists with
// flags it accepts, with a config that validates for its component; the
// components wait for the schema and the topics; the published ports are
// the config's listeners; Prometheus scrapes every component's metrics
// port and loads deploy/prometheus-rules.yaml; Grafana is provisioned with
// the Prometheus data source and deploy/grafana/roomflow.json.
func TestComposeStack(t *testing.T) {
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	p, err := loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  dir,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(dir, "docker-compose.yml")}},
		Environment: types.Mapping{}, // ${VAR:-default}: the defaults a fresh laptop gets
	}, func(o *loader.Options) { o.SetProjectName("roomflow", true) })
	if err != nil {
		t.Fatalf("deploy/docker-compose.yml does not load: %v", err)
	}
	commands := map[string]*cobra.Command{}
	for _, c := range command.NewRoot().Commands() {
		commands[c.Name()] = c
	}
	for name, s := range p.Services {
		for _, v := range s.Volumes {
			if v.Type != types.VolumeTypeBind {
				continue
			}
			if _, err := os.Stat(v.Source); err != nil && v.Source != filepath.Join(dir, composeDashboard) {
				t.Errorf("service %s mounts %s, which does not exist", name, v.Source)
			}
		}
	}

	kafka, ok := p.Services["kafka"]
	if !ok || !strings.HasPrefix(kafka.Image, "apache/kafka:") || !strings.Contains(env(kafka, "KAFKA_PROCESS_ROLES"), "controller") {
		t.Errorf("want an apache/kafka service in KRaft mode (process roles broker,controller), got %q %q", kafka.Image, env(kafka, "KAFKA_PROCESS_ROLES"))
	}
	if mysql := p.Services["mysql"]; mysql.Image != "mysql:8.0" {
		t.Errorf("want a mysql:8.0 service, got %q", mysql.Image)
	}

	// The roomflow services: one image, built once from deploy/Dockerfile.
	long := []string{"relay", "process", "sink", "publish-im", "lucky"}
	want := append([]string{"migrate", "topics"}, long...)
	var got []string
	var metricsTargets []string
	for name, s := range p.Services {
		if s.Image != p.Services["migrate"].Image {
			continue
		}
		got = append(got, name)
		cmd := []string(s.Command)
		if len(cmd) == 0 || commands[cmd[0]] == nil {
			t.Errorf("service %s runs %v, not a roomflow subcommand", name, cmd)
			continue
		}
		if err := commands[cmd[0]].ParseFlags(cmd[1:]); err != nil {
			t.Errorf("service %s: %v", name, err)
		}
		cfg := composeConfig(t, dir, name, s)
		if !slices.Contains(long, name) {
			continue
		}
		if cmd[0] != name || !slices.Contains(cmd, "--instance-id") {
			t.Errorf("service %s runs %v: want `roomflow %s` with an --instance-id (a static group member)", name, cmd, name)
		}
		for _, dep := range []string{"migrate", "topics"} {
			if s.DependsOn[dep].Condition != types.ServiceConditionCompletedSuccessfully {
				t.Errorf("service %s does not wait for %s to complete: %+v", name, dep, s.DependsOn)
			}
		}
		if !s.ReadOnly {
			t.Errorf("service %s: read_only must be true, as in Kubernetes", name)
		}
		metricsTargets = append(metricsTargets, fmt.Sprintf("%s:%d", name, port(t, "metrics.addr", cfg.Metrics.Addr)))
		listeners := map[uint32]string{}
		switch name {
		case "sink":
			listeners[uint32(port(t, "api.addr", cfg.API.Addr))] = "api.addr"
			listeners[uint32(port(t, "api.app_addr", cfg.API.AppAddr))] = "api.app_addr"
			listeners[uint32(port(t, "api.grpc_addr", cfg.API.GRPCAddr))] = "api.grpc_addr"
			if err := command.CheckPublishIM(&app.Deps{Config: cfg}); err != nil {
				t.Errorf("service %s: %v", name, err)
			}
		case "lucky":
			listeners[uint32(port(t, "lucky.grpc_addr", cfg.Lucky.GRPCAddr))] = "lucky.grpc_addr"
			if err := command.CheckLucky(&app.Deps{Config: cfg}); err != nil {
				t.Errorf("service lucky: its config does not satisfy roomflow lucky: %v", err)
			}
			if cfg.Lucky.Switches.WalletCreditDispatch {
				t.Error("service lucky: lucky.switches.wallet_credit_dispatch must be false (no wallet service on a laptop)")
			}
		case "publish-im":
			if err := command.CheckPublishIM(&app.Deps{Config: cfg}); err != nil {
				t.Errorf("service publish-im: %v", err)
			}
		}
		published := map[uint32]bool{}
		for _, sp := range s.Ports {
			if listeners[sp.Target] == "" {
				t.Errorf("service %s publishes container port %d, which none of its config's listeners uses (%v)", name, sp.Target, listeners)
			}
			published[sp.Target] = true
		}
		for port, key := range listeners {
			if !published[port] {
				t.Errorf("service %s does not publish %s (%d)", name, key, port)
			}
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("roomflow services %v, want %v", got, want)
	}
	if b := p.Services["migrate"].Build; b == nil || b.Context != filepath.Dir(dir) || b.Dockerfile != "deploy/Dockerfile" {
		t.Errorf("migrate must build the image from the repository with deploy/Dockerfile: %+v", b)
	}
	checkComposePrometheus(t, dir, p.Services["prometheus"], metricsTargets)
	checkComposeGrafana(t, dir, p.Services["grafana"])
}

// env is service s's environment variable k ("" if unset).
func env(s types.ServiceConfig, k string) string {
	if v := s.Environment[k]; v != nil {
		return *v
	}
	return ""
}

// composeConfig loads the config service s runs with: the file mounted at
// its --config path and its environment.
func composeConfig(t *testing.T, dir, name string, s types.ServiceConfig) *config.Config {
	t.Helper()
	cmd := []string(s.Command)
	i := slices.Index(cmd, "--config")
	if i < 0 || i+1 >= len(cmd) {
		t.Fatalf("service %s: no --config", name)
	}
	var src string
	for _, v := range s.Volumes {
		if v.Target == cmd[i+1] {
			src = v.Source
		}
	}
	if src == "" || !strings.HasPrefix(src, dir) {
		t.Fatalf("service %s: --config %s is not a file mounted from deploy/", name, cmd[i+1])
	}
	cfg, err := config.Load(src, func(k string) string { return env(s, k) })
	if err != nil {
		t.Fatalf("service %s: its config does not validate: %v", name, err)
	}
	if brokers := strings.Join(cfg.Kafka.Brokers, ","); brokers != "kafka:9092" {
		t.Errorf("service %s: brokers %s, want the kafka service's listener kafka:9092", name, brokers)
	}
	if !strings.Contains(cfg.MySQL.DSN, "@tcp(mysql:3306)/") {
		t.Errorf("service %s: the DSN does not name the mysql service", name)
	}
	return cfg
}

// mountOf returns the source of the bind mount of s at target ("" if none).
func mountOf(s types.ServiceConfig, target string) string {
	for _, v := range s.Volumes {
		if v.Target == target {
			return v.Source
		}
	}
	return ""
}

func checkComposePrometheus(t *testing.T, dir string, s types.ServiceConfig, wantTargets []string) {
	t.Helper()
	cfgPath := mountOf(s, "/etc/prometheus/prometheus.yml")
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatalf("prometheus: its config: %v", err)
	}
	var pc struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(raw, &pc); err != nil {
		t.Fatalf("%s: %v", cfgPath, err)
	}
	var targets []string
	for _, sc := range pc.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			targets = append(targets, st.Targets...)
		}
	}
	slices.Sort(targets)
	slices.Sort(wantTargets)
	if !slices.Equal(targets, wantTargets) {
		t.Errorf("prometheus scrapes %v, want every component's metrics.addr %v", targets, wantTargets)
	}
	loaded := false
	for _, v := range s.Volumes {
		if v.Source != filepath.Join(dir, "prometheus-rules.yaml") {
			continue
		}
		for _, g := range pc.RuleFiles {
			ok, err := path.Match(g, v.Target)
			loaded = loaded || (err == nil && ok)
		}
	}
	if !loaded {
		t.Errorf("prometheus does not load deploy/prometheus-rules.yaml: no rule_files pattern %v matches where it is mounted", pc.RuleFiles)
	}
}

func checkComposeGrafana(t *testing.T, dir string, s types.ServiceConfig) {
	t.Helper()
	prov := mountOf(s, "/etc/grafana/provisioning")
	if prov != filepath.Join(dir, "grafana", "provisioning") {
		t.Fatalf("grafana: deploy/grafana/provisioning is not mounted at /etc/grafana/provisioning (%q)", prov)
	}
	var dashTarget string
	for _, v := range s.Volumes {
		if v.Source == filepath.Join(dir, composeDashboard) {
			dashTarget = v.Target
		}
	}
	if dashTarget == "" {
		t.Fatalf("grafana does not mount deploy/%s", composeDashboard)
	}
	var providers struct {
		Providers []struct {
			Type    string `yaml:"type"`
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	var sources struct {
		Datasources []struct {
			Type string `yaml:"type"`
			URL  string `yaml:"url"`
		} `yaml:"datasources"`
	}
	for _, f := range []struct {
		file string
		into any
	}{{"dashboards/roomflow.yaml", &providers}, {"datasources/prometheus.yaml", &sources}} {
		raw, err := os.ReadFile(filepath.Join(prov, f.file))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(raw, f.into); err != nil {
			t.Fatalf("%s: %v", f.file, err)
		}
	}
	if len(providers.Providers) != 1 || providers.Providers[0].Type != "file" || providers.Providers[0].Options.Path != path.Dir(dashTarget) {
		t.Errorf("grafana's dashboard provider must read %s, where the dashboard is mounted: %+v", path.Dir(dashTarget), providers)
	}
	if len(sources.Datasources) != 1 || sources.Datasources[0].Type != "prometheus" || sources.Datasources[0].URL != "http://prometheus:9090" {
		t.Errorf("grafana's data source must be the prometheus service: %+v", sources)
	}
}

// The image: deploy/Dockerfile runs as the numeric user the manifests
// check, stamps VERSION and REVISION into internal/buildinfo, and its build
// context (.dockerignore) holds every file `go build ./cmd/roomflow` reads
// (the packages it imports, their embedded files, go.mod, go.sum) but not
// the repository's history, tests, docs or deploy files.
func TestDockerImage(t *testing.T) {
	raw, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := strings.ReplaceAll(string(raw), "\\\n", " ")
	for _, re := range []string{
		fmt.Sprintf(`(?m)^USER %d:%d$`, imageUID, imageUID), // the ids the manifests run as
		`(?m)^ARG VERSION\b`, `(?m)^ARG REVISION\b`,
		`-X github\.com/hyapp/roomflow/internal/buildinfo\.Version=\$\{VERSION\}`,
		`-X github\.com/hyapp/roomflow/internal/buildinfo\.Revision=\$\{REVISION\}`,
		`go build [^\n]*\./cmd/roomflow`,
	} {
		if !regexp.MustCompile(re).MatchString(df) {
			t.Errorf("deploy/Dockerfile: no match for %s", re)
		}
	}

	f, err := os.Open("../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatal(err)
	}
	ignored := func(rel string) bool {
		ok, err := pm.MatchesOrParentMatches(rel)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	needed := []string{"go.mod", "go.sum"}
	seen := map[string]bool{}
	var walk func(dir string)
	walk = func(dir string) {
		if seen[dir] {
			return
		}
		seen[dir] = true
		pkg, err := build.Default.ImportDir(filepath.Join("..", dir), 0)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		for _, f := range pkg.GoFiles {
			needed = append(needed, path.Join(dir, f))
		}
		for _, pat := range pkg.EmbedPatterns {
			m, _ := fs.Glob(os.DirFS(".."), path.Join(dir, pat))
			if len(m) == 0 {
				t.Fatalf("%s: //go:embed %s matches nothing", dir, pat)
			}
			needed = append(needed, m...)
		}
		for _, imp := range pkg.Imports {
			if rest, ok := strings.CutPrefix(imp, "github.com/hyapp/roomflow/"); ok {
				walk(rest)
			}
		}
	}
	walk("cmd/roomflow")
	for _, f := range needed {
		if ignored(f) {
			t.Errorf(".dockerignore excludes %s, which the image's go build reads", f)
		}
	}
	for _, f := range []string{".git/HEAD", "cmd/roomflow/deploy_test.go", "docs", "deploy/kubernetes/kustomization.yaml", "README.md"} {
		if !ignored(f) {
			t.Errorf(".dockerignore does not exclude %s", f)
		}
	}
	if len(needed) < 50 {
		t.Fatalf("only %d files found for the build: the walk is broken", len(needed))
	}
}
