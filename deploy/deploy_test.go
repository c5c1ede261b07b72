package deploy

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	psapolicy "k8s.io/pod-security-admission/policy"

	"github.com/hyapp/roomflow/cmd/roomflow/command"
	"github.com/hyapp/roomflow/internal/app"
	"github.com/hyapp/roomflow/internal/config"
)

// The Kubernetes manifests must stay true to the binary and to the
// platform's rules. Every file decodes strictly into its API type and
// `kustomize build` succeeds; on what it builds: the config validates,
// every container runs a subcommand that exists with flags it accepts,
// every Deployment's container is a static group member named after its
// pod (--instance-id from the downward API, so a container restarted after
// a crash takes its partitions straight back), every pod template passes
// the restricted Pod Security Standard, ports and probes follow
// metrics.addr, api.* and lucky.grpc_addr, every Deployment has a
// Service, a PodDisruptionBudget, a topology spread over zones and nodes
// and GOMEMLIMIT under its memory limit, the consumers scale on their
// groups' lag up to kafka.partitions, and a config change rolls the pods.
func TestDeployManifests(t *testing.T) {
	files, perFile, kust := readManifestFiles(t)
	checkKustomization(t, perFile, kust)
	m := kustomizeBuild(t)

	commands := map[string]*cobra.Command{}
	for _, c := range command.NewRoot().Commands() {
		commands[c.Name()] = c
	}
	if len(files.secrets) != 1 {
		t.Fatalf("want the one example Secret, got %d", len(files.secrets))
	}
	secretEnv := files.secrets[0].StringData
	secretKeys := map[string]bool{}
	for k := range secretEnv {
		secretKeys[k] = true
	}
	if !secretKeys["ROOMFLOW_LUCKY_AUDIT_KEY"] {
		t.Error("secret.example.yaml: ROOMFLOW_LUCKY_AUDIT_KEY missing (roomflow lucky refuses to start without it)")
	}

	// The config: generated from config/roomflow.yaml under a content-hashed
	// name that every pod template mounts.
	if len(m.configMaps) != 1 || !hasPrefixName(m.configMaps[0].Name, "roomflow-config") {
		t.Fatalf("want the one generated ConfigMap roomflow-config-<hash>, got %d", len(m.configMaps))
	}
	cm := m.configMaps[0]
	file, err := os.ReadFile(filepath.Join(manifestDir, "config", "roomflow.yaml"))
	if err != nil || cm.Data["roomflow.yaml"] != string(file) {
		t.Fatalf("the generated ConfigMap does not hold config/roomflow.yaml (%v)", err)
	}
	p := filepath.Join(t.TempDir(), "roomflow.yaml")
	if err := os.WriteFile(p, file, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(p, func(k string) string { return secretEnv[k] })
	if err != nil {
		t.Fatalf("the ConfigMap's config does not validate: %v", err)
	}
	d := &app.Deps{Config: cfg}
	if err := command.CheckPublishIM(d); err != nil {
		t.Fatalf("the ConfigMap's config and the example Secret must satisfy publish-im: %v", err)
	}
	if err := command.CheckLucky(d); err != nil {
		t.Fatalf("the ConfigMap's config and the example Secret must satisfy roomflow lucky: %v", err)
	}

	ev, err := psapolicy.NewEvaluator(psapolicy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	sas := map[string]*corev1.ServiceAccount{}
	for _, sa := range m.serviceAccounts {
		sas[sa.Name] = sa
	}
	image := kustomizeImage(kust)
	var containers int
	for _, pt := range m.podTemplates() {
		checkPodSecurity(t, ev, sas, pt)
		mounted := false
		for _, v := range pt.tmpl.Spec.Volumes {
			mounted = mounted || (v.ConfigMap != nil && v.ConfigMap.Name == cm.Name)
		}
		if !mounted {
			t.Errorf("%s does not mount the generated ConfigMap %s", pt.where, cm.Name)
		}
		for _, c := range append(slices.Clone(pt.tmpl.Spec.InitContainers), pt.tmpl.Spec.Containers...) {
			containers++
			if c.Image != image {
				t.Errorf("%s: container %s runs image %q, want %q (the kustomization's release tag)", pt.where, c.Name, c.Image, image)
			}
			if len(c.Args) == 0 || commands[c.Args[0]] == nil {
				t.Errorf("%s: container %s runs %v, not a roomflow subcommand", pt.where, c.Name, c.Args)
				continue
			}
			if err := commands[c.Args[0]].ParseFlags(c.Args[1:]); err != nil {
				t.Errorf("%s: container %s: %v", pt.where, c.Name, err)
			}
			if !slices.ContainsFunc(c.EnvFrom, func(e corev1.EnvFromSource) bool {
				return e.SecretRef != nil && e.SecretRef.Name == files.secrets[0].Name
			}) {
				t.Errorf("%s: container %s does not read the Secret %s", pt.where, c.Name, files.secrets[0].Name)
			}
		}
	}
	for _, j := range m.jobs {
		if j.Spec.TTLSecondsAfterFinished == nil || *j.Spec.TTLSecondsAfterFinished <= 0 {
			t.Errorf("Job %s: ttlSecondsAfterFinished unset: the next release's apply would hit the Job's immutable template", j.Name)
		}
	}
	checkSchemaRegistry(t, m, cfg, files.secrets[0].Name)

	// Every long-running component: one Deployment each, with its
	// listeners from the config.
	metricsPort := port(t, "metrics.addr", cfg.Metrics.Addr)
	listeners := map[string]map[string]int32{
		"roomflow-relay":      {},
		"roomflow-process":    {},
		"roomflow-sink":       {"api": port(t, "api.addr", cfg.API.Addr), "app-api": port(t, "api.app_addr", cfg.API.AppAddr), "grpc": port(t, "api.grpc_addr", cfg.API.GRPCAddr)},
		"roomflow-publish-im": {},
		"roomflow-lucky":      {"grpc": port(t, "lucky.grpc_addr", cfg.Lucky.GRPCAddr)},
	}
	if len(m.deployments) != len(listeners) {
		t.Errorf("%d Deployments, want %d (%v)", len(m.deployments), len(listeners), listeners)
	}
	for name, want := range listeners {
		dep := m.deployment(name)
		if dep == nil {
			t.Errorf("no Deployment %s", name)
			continue
		}
		checkDeployment(t, m, dep, metricsPort, want)
		checkGracePeriod(t, dep, cfg, len(want) > 0)
	}
	checkServices(t, m, cfg)
	checkNetworkPolicies(t, m)
	checkScaling(t, m, cfg.Kafka.Partitions, map[string]map[string]string{
		"roomflow-process": {cfg.Process.RoomGroup: cfg.Kafka.Topics.RoomEvents, cfg.Process.MicGroup: cfg.Kafka.Topics.UserMicEvents},
		"roomflow-sink":    {cfg.Sink.Group: ""},
	}, secretKeys)
	if containers < 7 {
		t.Fatalf("%d containers, want the five components, migrate and topics", containers)
	}
}

// checkDeployment checks one component's Deployment: instance id, ports
// and probes, GOMEMLIMIT, topology spread, its PodDisruptionBudget and
// its PodMonitor.
func checkDeployment(t *testing.T, m *manifests, d *appsv1.Deployment, metricsPort int32, listeners map[string]int32) {
	t.Helper()
	where := "Deployment " + d.Name
	if len(d.Spec.Template.Spec.Containers) != 1 {
		t.Errorf("%s: want one container, got %d", where, len(d.Spec.Template.Spec.Containers))
		return
	}
	c := d.Spec.Template.Spec.Containers[0]
	checkInstanceID(t, where, c)
	checkGOMEMLIMIT(t, where, c)
	want := map[string]int32{"metrics": metricsPort}
	maps.Copy(want, listeners)
	got := map[string]int32{}
	for _, p := range c.Ports {
		got[p.Name] = p.ContainerPort
	}
	if !maps.Equal(got, want) {
		t.Errorf("%s: container ports %v, want %v (metrics.addr, api.*, lucky.grpc_addr)", where, got, want)
	}
	for _, pr := range []struct {
		kind, path string
		probe      *corev1.Probe
	}{{"liveness", "/healthz", c.LivenessProbe}, {"readiness", "/readyz", c.ReadinessProbe}} {
		if pr.probe == nil || pr.probe.HTTPGet == nil || pr.probe.HTTPGet.Path != pr.path || containerPort(c, pr.probe.HTTPGet.Port) != metricsPort {
			t.Errorf("%s: %s probe must GET %s on the metrics port %d: %+v", where, pr.kind, pr.path, metricsPort, pr.probe)
		}
	}
	keys := map[string]bool{}
	for _, tsc := range d.Spec.Template.Spec.TopologySpreadConstraints {
		if selects(t, tsc.LabelSelector, d) && tsc.MaxSkew == 1 {
			keys[tsc.TopologyKey] = true
		}
	}
	if !keys["topology.kubernetes.io/zone"] || !keys["kubernetes.io/hostname"] {
		t.Errorf("%s: want topology spread (maxSkew 1, its own pods) over zones and nodes, got %v", where, keys)
	}
	pdbs := 0
	for _, pdb := range m.pdbs {
		if selects(t, pdb.Spec.Selector, d) {
			pdbs++
			if pdb.Spec.MaxUnavailable == nil && pdb.Spec.MinAvailable == nil {
				t.Errorf("PDB %s sets neither maxUnavailable nor minAvailable", pdb.Name)
			}
		}
	}
	if pdbs != 1 {
		t.Errorf("%s: %d PodDisruptionBudgets select its pods, want 1", where, pdbs)
	}
	monitored := false
	for _, pm := range m.podMonitors {
		for _, ep := range pm.Spec.PodMetricsEndpoints {
			monitored = monitored || (selects(t, &pm.Spec.Selector, d) && ep.Port != nil && containerPort(c, intstr.FromString(*ep.Port)) == metricsPort)
		}
	}
	if !monitored {
		t.Errorf("%s: no PodMonitor scrapes its metrics port", where)
	}
}

// checkGracePeriod requires terminationGracePeriodSeconds to cover the
// longest stop: shutdown.drain_delay (for a Deployment with listeners),
// shutdown.timeout and the frame's StuckMargin, so the kubelet never
// SIGKILLs a drain.
func checkGracePeriod(t *testing.T, d *appsv1.Deployment, cfg *config.Config, serving bool) {
	t.Helper()
	stop := cfg.Shutdown.Timeout.D() + config.StuckMargin
	if serving {
		stop += cfg.Shutdown.DrainDelay.D()
	}
	var grace time.Duration // unset: the kubelet's 30s, but say it in the manifest
	if g := d.Spec.Template.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	if grace < stop {
		t.Errorf("Deployment %s: terminationGracePeriodSeconds %s, want at least %s, the longest stop", d.Name, grace, stop)
	}
}

// checkServices requires each Service to select one Deployment and to
// target its container ports by name, on the same numbers; each
// Deployment to have a Service with its metrics port; and api.app_addr
// (the gateway's /me routes) in a Service of its own.
func checkServices(t *testing.T, m *manifests, cfg *config.Config) {
	t.Helper()
	hasMetrics := map[string]bool{}
	appPort := port(t, "api.app_addr", cfg.API.AppAddr)
	for _, s := range m.services {
		var dep *appsv1.Deployment
		for _, d := range m.deployments {
			if selects(t, &metav1.LabelSelector{MatchLabels: s.Spec.Selector}, d) {
				if dep != nil {
					t.Errorf("Service %s selects the pods of both %s and %s", s.Name, dep.Name, d.Name)
				}
				dep = d
			}
		}
		if dep == nil {
			t.Errorf("Service %s selects no Deployment's pods", s.Name)
			continue
		}
		c := dep.Spec.Template.Spec.Containers[0]
		app := false
		for _, sp := range s.Spec.Ports {
			if sp.TargetPort.Type != intstr.String || containerPort(c, sp.TargetPort) != sp.Port {
				t.Errorf("Service %s port %s: targetPort %s must name a container port of %s numbered %d", s.Name, sp.Name, sp.TargetPort.String(), dep.Name, sp.Port)
			}
			if sp.TargetPort.StrVal == "metrics" {
				hasMetrics[dep.Name] = true
			}
			app = app || sp.Port == appPort
		}
		if app && len(s.Spec.Ports) != 1 {
			t.Errorf("Service %s exposes api.app_addr (%d) with other ports: the gateway-only routes need a Service of their own", s.Name, appPort)
		}
	}
	for _, d := range m.deployments {
		if !hasMetrics[d.Name] {
			t.Errorf("Deployment %s has no Service with its metrics port", d.Name)
		}
	}
}

// checkInstanceID requires c to pass --instance-id $(VAR) with VAR taken
// from the pod's metadata.name (Kubernetes expands $(VAR) in args).
func checkInstanceID(t *testing.T, file string, c corev1.Container) {
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
		if e.Name == v[2:len(v)-1] && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name" {
			return
		}
	}
	t.Errorf("%s: container %s: %s is not the downward API's metadata.name", file, c.Name, v)
}

// checkSchemaRegistry: the migrate Job's topics registers the public
// topics' schemas, so it runs `topics` with the Secret that holds the
// registry's password, and the config gives the registry's address and
// user, the password loading from that Secret.
func checkSchemaRegistry(t *testing.T, m *manifests, cfg *config.Config, secret string) {
	t.Helper()
	if cfg.SchemaRegistry.URL == "" || cfg.SchemaRegistry.User == "" || cfg.SchemaRegistry.Password() == "" {
		t.Errorf("config/roomflow.yaml and the example Secret must give schema_registry.url, .user and ROOMFLOW_SCHEMA_REGISTRY_PASSWORD (got url %q, user %q, password set %v)",
			cfg.SchemaRegistry.URL, cfg.SchemaRegistry.User, cfg.SchemaRegistry.Password() != "")
	}
	for _, j := range m.jobs {
		for _, c := range j.Spec.Template.Spec.Containers {
			if len(c.Args) > 0 && c.Args[0] == "topics" && slices.ContainsFunc(c.EnvFrom, func(e corev1.EnvFromSource) bool {
				return e.SecretRef != nil && e.SecretRef.Name == secret
			}) {
				return
			}
		}
	}
	t.Error("no Job runs roomflow topics with the Secret: the public topics' schemas would never be registered")
}
