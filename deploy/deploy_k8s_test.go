package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	psaapi "k8s.io/pod-security-admission/api"
	psapolicy "k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/kustomize/api/krusty"
	kusttypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	sigsyaml "sigs.k8s.io/yaml"
)

// manifestDir is deploy/kubernetes, relative to this package.
const manifestDir = "kubernetes"

// imageUID is the numeric user and group of deploy/Dockerfile's USER (the
// distroless nonroot ids) that every pod runs as.
const imageUID = 65532

// manifests is a set of decoded Kubernetes objects: one file's, the whole
// directory's, or the output of `kustomize build`.
type manifests struct {
	deployments     []*appsv1.Deployment
	jobs            []*batchv1.Job
	cronJobs        []*batchv1.CronJob
	services        []*corev1.Service
	serviceAccounts []*corev1.ServiceAccount
	configMaps      []*corev1.ConfigMap
	secrets         []*corev1.Secret
	pdbs            []*policyv1.PodDisruptionBudget
	hpas            []*autoscalingv2.HorizontalPodAutoscaler
	podMonitors     []*monitoringv1.PodMonitor
	serviceMonitors []*monitoringv1.ServiceMonitor
	prometheusRules []*monitoringv1.PrometheusRule
	networkPolicies []*networkingv1.NetworkPolicy
	scaledObjects   []*scaledObject
}

// scaledObject is the part of KEDA's keda.sh/v1alpha1 ScaledObject the
// manifests use, with KEDA's JSON names. KEDA's Go module
// (github.com/kedacore/keda/v2) resolves, but its API package drags in
// controller-runtime, client-go and its webhooks (minutes of compiling on
// every fresh machine) for one type, so this structural copy stands in:
// decoded strictly, a field KEDA does not have (or that this copy does not
// list) fails the test instead of being ignored.
type scaledObject struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		ScaleTargetRef struct {
			APIVersion string `json:"apiVersion,omitempty"`
			Kind       string `json:"kind,omitempty"`
			Name       string `json:"name"`
		} `json:"scaleTargetRef"`
		PollingInterval *int32 `json:"pollingInterval,omitempty"`
		CooldownPeriod  *int32 `json:"cooldownPeriod,omitempty"`
		MinReplicaCount *int32 `json:"minReplicaCount,omitempty"`
		MaxReplicaCount *int32 `json:"maxReplicaCount,omitempty"`
		Advanced        *struct {
			HorizontalPodAutoscalerConfig *struct {
				Name     string                                         `json:"name,omitempty"`
				Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior,omitempty"`
			} `json:"horizontalPodAutoscalerConfig,omitempty"`
			RestoreToOriginalReplicaCount bool `json:"restoreToOriginalReplicaCount,omitempty"`
		} `json:"advanced,omitempty"`
		Triggers []struct {
			Type              string            `json:"type"`
			Name              string            `json:"name,omitempty"`
			Metadata          map[string]string `json:"metadata"`
			AuthenticationRef *struct {
				Name string `json:"name"`
				Kind string `json:"kind,omitempty"`
			} `json:"authenticationRef,omitempty"`
		} `json:"triggers"`
	} `json:"spec"`
}

// kafkaTriggerKeys are the metadata keys of KEDA's kafka scaler (v2.21,
// pkg/scalers/kafka_scaler.go) the manifests may use; the three the
// scaler resolves from the target's environment also as <key>FromEnv.
var kafkaTriggerKeys = map[string]bool{
	"bootstrapServers": true, "bootstrapServersFromEnv": true,
	"consumerGroup": true, "consumerGroupFromEnv": true,
	"topic": true, "topicFromEnv": true,
	"lagThreshold": true, "activationLagThreshold": true, "offsetResetPolicy": true,
	"allowIdleConsumers": true, "excludePersistentLag": true, "scaleToZeroOnInvalidOffset": true,
	"limitToPartitionsWithLag": true, "partitionLimitation": true, "tls": true, "sasl": true,
}

// kubeDecoder decodes YAML into the API types of every group the
// manifests use, strictly: an unknown or duplicated field is an error.
func kubeDecoder(t *testing.T) runtime.Decoder {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, batchv1.AddToScheme, policyv1.AddToScheme,
		autoscalingv2.AddToScheme, monitoringv1.AddToScheme, networkingv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDeserializer()
}

// splitYAML returns the documents of a multi-document YAML stream, less
// the empty ones (comments only).
func splitYAML(t *testing.T, where string, raw []byte) [][]byte {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		var probe map[string]any
		if err := sigsyaml.Unmarshal(doc, &probe); err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		if len(probe) > 0 {
			docs = append(docs, doc)
		}
	}
}

// add decodes one document strictly into its API type and files it.
func (m *manifests) add(t *testing.T, dec runtime.Decoder, where string, doc []byte) {
	t.Helper()
	var tm metav1.TypeMeta
	if err := sigsyaml.Unmarshal(doc, &tm); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	if tm.APIVersion == "" || tm.Kind == "" {
		t.Fatalf("%s: apiVersion and kind required", where)
	}
	if tm.APIVersion == "keda.sh/v1alpha1" && tm.Kind == "ScaledObject" {
		so := &scaledObject{}
		if err := sigsyaml.UnmarshalStrict(doc, so); err != nil {
			t.Fatalf("%s: ScaledObject: %v", where, err)
		}
		m.scaledObjects = append(m.scaledObjects, so)
		return
	}
	obj, _, err := dec.Decode(doc, nil, nil)
	if err != nil {
		t.Fatalf("%s: %s %s does not decode strictly: %v", where, tm.APIVersion, tm.Kind, err)
	}
	switch o := obj.(type) {
	case *appsv1.Deployment:
		m.deployments = append(m.deployments, o)
	case *batchv1.Job:
		m.jobs = append(m.jobs, o)
	case *batchv1.CronJob:
		m.cronJobs = append(m.cronJobs, o)
	case *corev1.Service:
		m.services = append(m.services, o)
	case *corev1.ServiceAccount:
		m.serviceAccounts = append(m.serviceAccounts, o)
	case *corev1.ConfigMap:
		m.configMaps = append(m.configMaps, o)
	case *corev1.Secret:
		m.secrets = append(m.secrets, o)
	case *policyv1.PodDisruptionBudget:
		m.pdbs = append(m.pdbs, o)
	case *autoscalingv2.HorizontalPodAutoscaler:
		m.hpas = append(m.hpas, o)
	case *monitoringv1.PodMonitor:
		m.podMonitors = append(m.podMonitors, o)
	case *monitoringv1.ServiceMonitor:
		m.serviceMonitors = append(m.serviceMonitors, o)
	case *monitoringv1.PrometheusRule:
		m.prometheusRules = append(m.prometheusRules, o)
	case *networkingv1.NetworkPolicy:
		m.networkPolicies = append(m.networkPolicies, o)
	default:
		t.Fatalf("%s: %s %s: no check knows this kind; add one to deploy_k8s_test.go", where, tm.APIVersion, tm.Kind)
	}
}

// readManifestFiles decodes every deploy/kubernetes/*.yaml strictly,
// kustomization.yaml into kustomize's own type. It returns the objects and
// the kustomization.
func readManifestFiles(t *testing.T) (*manifests, map[string]*manifests, *kusttypes.Kustomization) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(manifestDir, "*.yaml"))
	if err != nil || len(files) < 5 {
		t.Fatalf("manifests missing: %v %v", files, err)
	}
	dec := kubeDecoder(t)
	all := &manifests{}
	perFile := map[string]*manifests{}
	var kust *kusttypes.Kustomization
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		base := filepath.Base(f)
		if base == "kustomization.yaml" {
			kust = &kusttypes.Kustomization{}
			if err := sigsyaml.UnmarshalStrict(raw, kust); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			continue
		}
		one := &manifests{}
		for i, doc := range splitYAML(t, f, raw) {
			where := fmt.Sprintf("%s#%d", base, i)
			one.add(t, dec, where, doc)
			all.add(t, dec, where, doc)
		}
		perFile[base] = one
	}
	if kust == nil {
		t.Fatal("deploy/kubernetes/kustomization.yaml missing")
	}
	return all, perFile, kust
}

// kustomizeBuild runs `kustomize build deploy/kubernetes` in-process and
// decodes its output strictly.
func kustomizeBuild(t *testing.T) *manifests {
	t.Helper()
	dir, err := filepath.Abs(manifestDir)
	if err != nil {
		t.Fatal(err)
	}
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build deploy/kubernetes: %v", err)
	}
	dec := kubeDecoder(t)
	built := &manifests{}
	for _, r := range rm.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		built.add(t, dec, "kustomize build: "+r.CurId().String(), y)
	}
	return built
}

// podTemplate is one pod template of a workload.
type podTemplate struct {
	where string
	tmpl  corev1.PodTemplateSpec
}

func (m *manifests) podTemplates() []podTemplate {
	var out []podTemplate
	for _, d := range m.deployments {
		out = append(out, podTemplate{"Deployment " + d.Name, d.Spec.Template})
	}
	for _, j := range m.jobs {
		out = append(out, podTemplate{"Job " + j.Name, j.Spec.Template})
	}
	for _, c := range m.cronJobs {
		out = append(out, podTemplate{"CronJob " + c.Name, c.Spec.JobTemplate.Spec.Template})
	}
	return out
}

func (m *manifests) deployment(name string) *appsv1.Deployment {
	for _, d := range m.deployments {
		if d.Name == name {
			return d
		}
	}
	return nil
}

// checkPodSecurity requires tmpl to pass the restricted Pod Security
// Standard (the admission controller's own checks, at the latest policy
// version) and, beyond it, to run as the image's numeric user with a
// read-only root filesystem and no service account token.
func checkPodSecurity(t *testing.T, ev psapolicy.Evaluator, sas map[string]*corev1.ServiceAccount, p podTemplate) {
	t.Helper()
	lv := psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}
	res := psapolicy.AggregateCheckResults(ev.EvaluatePod(lv, &p.tmpl.ObjectMeta, &p.tmpl.Spec))
	if !res.Allowed {
		t.Errorf("%s violates the restricted Pod Security Standard: %s", p.where, res.ForbiddenDetail())
	}
	ps := p.tmpl.Spec
	sc := ps.SecurityContext
	if sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != imageUID || sc.RunAsGroup == nil || *sc.RunAsGroup != imageUID ||
		sc.FSGroup == nil || *sc.FSGroup != imageUID || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Errorf("%s: pod securityContext must run as non-root %d:%d with fsGroup %d (the Dockerfile's USER): %+v", p.where, imageUID, imageUID, imageUID, sc)
	}
	for _, c := range append(slices.Clone(ps.InitContainers), ps.Containers...) {
		if c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem {
			t.Errorf("%s: container %s: readOnlyRootFilesystem must be true", p.where, c.Name)
		}
	}
	if ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken {
		t.Errorf("%s: automountServiceAccountToken must be false (roomflow never calls the API server)", p.where)
	}
	sa := sas[ps.ServiceAccountName]
	if sa == nil {
		t.Errorf("%s: serviceAccountName %q is not a ServiceAccount of the manifests", p.where, ps.ServiceAccountName)
	} else if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
		t.Errorf("ServiceAccount %s: automountServiceAccountToken must be false", sa.Name)
	}
}

// port returns the port number of a host:port config address.
func port(t *testing.T, key, addr string) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s %q: %v", key, addr, err)
	}
	n, err := strconv.ParseInt(p, 10, 32)
	if err != nil {
		t.Fatalf("%s %q: %v", key, addr, err)
	}
	return int32(n)
}

// containerPort resolves a probe's or Service's port (a name or a number)
// against c's ports; 0 if c has no such port.
func containerPort(c corev1.Container, p intstr.IntOrString) int32 {
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return cp.ContainerPort
		}
	}
	return 0
}

// selects reports whether sel (a label selector) matches the labels of
// the pod template of d.
func selects(t *testing.T, sel *metav1.LabelSelector, d *appsv1.Deployment) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatal(err)
	}
	return !s.Empty() && s.Matches(labels.Set(d.Spec.Template.Labels))
}

// checkGOMEMLIMIT requires GOMEMLIMIT to be 90% of the container's memory
// limit, in MiB: see the manifests' comment for why a fixed fraction.
func checkGOMEMLIMIT(t *testing.T, where string, c corev1.Container) {
	t.Helper()
	limit, ok := c.Resources.Limits[corev1.ResourceMemory]
	if !ok {
		t.Errorf("%s: container %s has no memory limit", where, c.Name)
		return
	}
	want := fmt.Sprintf("%dMiB", limit.Value()/(1<<20)*9/10)
	for _, e := range c.Env {
		if e.Name == "GOMEMLIMIT" {
			if e.Value != want {
				t.Errorf("%s: container %s: GOMEMLIMIT %q, want %q (90%% of limits.memory %s)", where, c.Name, e.Value, want, limit.String())
			}
			return
		}
	}
	t.Errorf("%s: container %s sets no GOMEMLIMIT (want %q)", where, c.Name, want)
}

// livenessWindow is how long the process Deployment's liveness probe
// tolerates failures before the kubelet restarts the container:
// periodSeconds × failureThreshold (the Kubernetes defaults where unset).
func livenessWindow(t *testing.T) (window float64, probe *corev1.Probe) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(manifestDir, "process.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := &manifests{}
	dec := kubeDecoder(t)
	for i, doc := range splitYAML(t, "process.yaml", raw) {
		m.add(t, dec, fmt.Sprintf("process.yaml#%d", i), doc)
	}
	d := m.deployment("roomflow-process")
	if d == nil || len(d.Spec.Template.Spec.Containers) != 1 || d.Spec.Template.Spec.Containers[0].LivenessProbe == nil {
		t.Fatal("process.yaml: no roomflow-process Deployment with a liveness probe")
	}
	p := d.Spec.Template.Spec.Containers[0].LivenessProbe
	period, failures := p.PeriodSeconds, p.FailureThreshold
	if period == 0 {
		period = 10
	}
	if failures == 0 {
		failures = 3
	}
	return float64(period * failures), p
}

// checkKustomization requires every manifest file (but the example
// Secret) to be a resource of the kustomization, the config to come from a
// configMapGenerator, and the image to have a real tag.
func checkKustomization(t *testing.T, perFile map[string]*manifests, k *kusttypes.Kustomization) {
	t.Helper()
	for f := range perFile {
		if f != "secret.example.yaml" && !slices.Contains(k.Resources, f) {
			t.Errorf("kustomization.yaml does not list %s: kubectl apply -k would not deploy it", f)
		}
	}
	if len(k.ConfigMapGenerator) != 1 || k.ConfigMapGenerator[0].Name != "roomflow-config" {
		t.Errorf("want the one configMapGenerator roomflow-config (a config change rolls the pods), got %+v", k.ConfigMapGenerator)
	} else if g := k.ConfigMapGenerator[0]; !slices.Contains(g.FileSources, "roomflow.yaml=config/roomflow.yaml") ||
		(g.Options != nil && g.Options.DisableNameSuffixHash) {
		t.Errorf("configMapGenerator roomflow-config: want roomflow.yaml=config/roomflow.yaml with its content hash in the name, got %+v", g)
	}
	if len(k.Images) != 1 || k.Images[0].Name != "roomflow" || k.Images[0].NewTag == "" || k.Images[0].NewTag == "latest" {
		t.Errorf("kustomization images: want roomflow with a release tag (not latest), got %+v", k.Images)
	}
}

// checkScaling checks the KEDA ScaledObjects and the HPA against the
// config: one per scaled Deployment, none of which pins replicas, the
// triggers on the consumer groups the config names, at most
// kafka.partitions replicas.
func checkScaling(t *testing.T, m *manifests, partitions int32, groups map[string]map[string]string, secretKeys map[string]bool) {
	t.Helper()
	scaled := map[string]bool{}
	for _, so := range m.scaledObjects {
		where := "ScaledObject " + so.Metadata.Name
		target := m.deployment(so.Spec.ScaleTargetRef.Name)
		if target == nil || (so.Spec.ScaleTargetRef.Kind != "" && so.Spec.ScaleTargetRef.Kind != "Deployment") {
			t.Errorf("%s: scaleTargetRef %+v is not a Deployment of the manifests", where, so.Spec.ScaleTargetRef)
			continue
		}
		scaled[target.Name] = true
		if so.Spec.MaxReplicaCount == nil || *so.Spec.MaxReplicaCount != partitions {
			t.Errorf("%s: maxReplicaCount %s, want kafka.partitions = %d (a member past the partition count owns nothing)", where, fmtPtr(so.Spec.MaxReplicaCount), partitions)
		}
		if so.Spec.MinReplicaCount == nil || *so.Spec.MinReplicaCount < 2 {
			t.Errorf("%s: minReplicaCount %s: want at least 2 (a node loss must not stop the stage)", where, fmtPtr(so.Spec.MinReplicaCount))
		}
		want := groups[target.Name]
		got := map[string]string{}
		for _, tr := range so.Spec.Triggers {
			if tr.Type != "kafka" {
				t.Errorf("%s: trigger type %q, want kafka (consumer-group lag)", where, tr.Type)
				continue
			}
			for k := range tr.Metadata {
				if !kafkaTriggerKeys[k] {
					t.Errorf("%s: kafka trigger metadata %q is not a key of KEDA's kafka scaler", where, k)
				}
			}
			if env := tr.Metadata["bootstrapServersFromEnv"]; env == "" || !secretKeys[env] {
				t.Errorf("%s: bootstrapServersFromEnv %q: want an environment variable of the Secret the pods read", where, env)
			}
			got[tr.Metadata["consumerGroup"]] = tr.Metadata["topic"]
		}
		if len(got) != len(want) {
			t.Errorf("%s: triggers on groups %v, want %v", where, got, want)
		}
		for g, topic := range want {
			gotTopic, ok := got[g]
			if !ok || (gotTopic != "" && gotTopic != topic) {
				t.Errorf("%s: want a trigger on group %s (topic %q or all of the group's), got %v", where, g, topic, got)
			}
		}
	}
	for name := range groups {
		if !scaled[name] {
			t.Errorf("no ScaledObject scales %s on its consumer-group lag", name)
		}
	}
	for _, h := range m.hpas {
		target := m.deployment(h.Spec.ScaleTargetRef.Name)
		if target == nil || h.Spec.ScaleTargetRef.Kind != "Deployment" {
			t.Errorf("HPA %s: scaleTargetRef %+v is not a Deployment of the manifests", h.Name, h.Spec.ScaleTargetRef)
			continue
		}
		scaled[target.Name] = true
		cpu := false
		for _, mt := range h.Spec.Metrics {
			cpu = cpu || (mt.Type == autoscalingv2.ResourceMetricSourceType && mt.Resource != nil &&
				mt.Resource.Name == corev1.ResourceCPU && mt.Resource.Target.Type == autoscalingv2.UtilizationMetricType)
		}
		if !cpu {
			t.Errorf("HPA %s: want a CPU utilization metric", h.Name)
		}
		for _, c := range target.Spec.Template.Spec.Containers {
			if _, ok := c.Resources.Requests[corev1.ResourceCPU]; !ok {
				t.Errorf("HPA %s: container %s has no CPU request to take a utilization of", h.Name, c.Name)
			}
		}
	}
	if d := m.deployment("roomflow-lucky"); d != nil && !scaled[d.Name] {
		t.Error("no HorizontalPodAutoscaler scales roomflow-lucky")
	}
	for _, d := range m.deployments {
		if scaled[d.Name] && d.Spec.Replicas != nil {
			t.Errorf("Deployment %s sets replicas although an autoscaler owns the count: every apply would reset it", d.Name)
		}
	}
}

// kustomizeImage is the image the kustomization's images entry makes of
// "roomflow".
func kustomizeImage(k *kusttypes.Kustomization) string {
	return k.Images[0].NewName + ":" + k.Images[0].NewTag
}

// hasPrefixName reports whether name is base-<hash> (a generated name).
func hasPrefixName(name, base string) bool {
	return strings.HasPrefix(name, base+"-") && len(name) > len(base)+1
}

// fmtPtr prints *p, or "unset".
func fmtPtr(p *int32) string {
	if p == nil {
		return "unset"
	}
	return strconv.Itoa(int(*p))
}

// peerCheck says whether a NetworkPolicy peer is one a listener may admit.
type peerCheck struct {
	what string
	ok   func(networkingv1.NetworkPolicyPeer) bool
}

func matchesLabels(sel *metav1.LabelSelector, key, value string) bool {
	if sel == nil {
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && !s.Empty() && s.Matches(labels.Set{key: value})
}

// checkNetworkPolicies: every roomflow pod denies ingress by default; each
// container port of a Deployment is admitted only from its callers
// (metrics: the monitoring namespace; lucky's gRPC: room-service's pods;
// the app API: the gateway's pods; the internal API and UserService: a
// namespace), never from everywhere (an empty from, an ipBlock), and a
// policy names only ports the selected pods have.
func checkNetworkPolicies(t *testing.T, m *manifests) {
	t.Helper()
	if len(m.networkPolicies) == 0 {
		t.Fatal("no NetworkPolicy: deploy/kubernetes must ship them")
	}
	selectsLabels := func(np *networkingv1.NetworkPolicy, l map[string]string) bool {
		s, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil {
			t.Fatalf("NetworkPolicy %s: %v", np.Name, err)
		}
		return !s.Empty() && s.Matches(labels.Set(l))
	}
	for _, pt := range m.podTemplates() {
		denied := false
		for _, np := range m.networkPolicies {
			denied = denied || (selectsLabels(np, pt.tmpl.Labels) && slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) && len(np.Spec.Ingress) == 0)
		}
		if !denied {
			t.Errorf("%s: no default-deny ingress NetworkPolicy selects its pods", pt.where)
		}
	}
	namespace := func(ns string) peerCheck {
		return peerCheck{"the " + ns + " namespace", func(p networkingv1.NetworkPolicyPeer) bool {
			return p.IPBlock == nil && matchesLabels(p.NamespaceSelector, "kubernetes.io/metadata.name", ns)
		}}
	}
	pods := func(name string) peerCheck {
		return peerCheck{name + "'s pods", func(p networkingv1.NetworkPolicyPeer) bool {
			return p.IPBlock == nil && matchesLabels(p.PodSelector, "app.kubernetes.io/name", name)
		}}
	}
	anyNamespace := peerCheck{"a namespace of internal callers", func(p networkingv1.NetworkPolicyPeer) bool {
		return p.IPBlock == nil && p.PodSelector == nil && p.NamespaceSelector != nil &&
			(len(p.NamespaceSelector.MatchLabels) > 0 || len(p.NamespaceSelector.MatchExpressions) > 0)
	}}
	want := map[string]map[string]peerCheck{
		"roomflow-lucky": {"grpc": pods("room-service")},
		"roomflow-sink":  {"app-api": pods("gateway"), "api": anyNamespace, "grpc": anyNamespace},
	}
	for _, d := range m.deployments {
		c := d.Spec.Template.Spec.Containers[0]
		ports := map[string]int32{}
		for _, p := range c.Ports {
			ports[p.Name] = p.ContainerPort
		}
		admitted := map[string][]networkingv1.NetworkPolicyPeer{}
		for _, np := range m.networkPolicies {
			if !selectsLabels(np, d.Spec.Template.Labels) {
				continue
			}
			for i, r := range np.Spec.Ingress {
				where := fmt.Sprintf("NetworkPolicy %s ingress[%d] on %s", np.Name, i, d.Name)
				if len(r.From) == 0 {
					t.Errorf("%s admits every source", where)
				}
				if len(r.Ports) == 0 {
					t.Errorf("%s admits every port", where)
				}
				for _, pp := range r.Ports {
					name := ""
					for n, num := range ports {
						if pp.Port != nil && (pp.Port.String() == n || pp.Port.IntValue() == int(num)) {
							name = n
						}
					}
					if name == "" {
						t.Errorf("%s names port %v, which its pods do not have (%v)", where, pp.Port, ports)
						continue
					}
					admitted[name] = append(admitted[name], r.From...)
				}
			}
		}
		for name := range ports {
			check, ok := want[d.Name][name]
			if name == "metrics" {
				check, ok = namespace("monitoring"), true
			}
			if !ok {
				t.Errorf("%s: port %s has no expected callers in this test: add them", d.Name, name)
				continue
			}
			if len(admitted[name]) == 0 {
				t.Errorf("%s: port %s is admitted from nowhere: %s must reach it", d.Name, name, check.what)
			}
			for _, p := range admitted[name] {
				if !check.ok(p) {
					t.Errorf("%s: port %s admits %+v, want only %s", d.Name, name, p, check.what)
				}
			}
		}
	}
}
