package command

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.yaml.in/yaml/v3"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/producers/relay"
)

// TestPurgeCommand: `roomflow purge` reads the relay's committed position
// from kafka.topics.relay_offsets (high-water 9, open hole 6) and deletes
// only the old delivered room_outbox rows below the hole; it refuses, naming
// the key, a window shorter than kafka.topic_retention or than a deduped
// topic's retention.ms on the brokers.
func TestPurgeCommand(t *testing.T) {
	k := testenv.NewKafka(t, testenv.Partitions(1))
	m := testenv.NewMySQL(t)
	ctx := context.Background()
	old := time.Now().Add(-30 * 24 * time.Hour).UnixMilli()
	for id := 1; id <= 12; id++ {
		if _, err := m.DB.Exec(`INSERT INTO room_outbox (id, app_code, event_id, event_type, room_id, payload, status, occurred_at_ms, created_at_ms, updated_at_ms)
			VALUES (?, 'hyapp', ?, 'RoomMicChanged', 'r', 'p', 'delivered', ?, ?, ?)`, id, fmt.Sprint("e", id), old, old, old); err != nil {
			t.Fatal(err)
		}
	}
	cfg := "mysql:\n  dsn: \"" + m.DSN + "\"\nlog:\n  level: error\n" + k.ConfigYAML(1) +
		"purge:\n  room_outbox:\n    enabled: true\n    age: 24h\n"

	// No relay position yet: room_outbox is left alone.
	out, err := runCLI(t, cfg, "purge")
	if err != nil || !strings.Contains(out, "the relay has no committed position") {
		t.Fatalf("purge without a relay position: %v\n%s", err, out)
	}
	pos := relay.EncodePosition(relay.Position{High: 9, ClockMs: 5, Holes: []relay.Hole{{ID: 6, FirstSeenMs: 1}}})
	if err := k.Client(t).ProduceSync(ctx, &kgo.Record{Topic: k.Config.Topics.RelayOffsets, Partition: 0, Key: []byte("roomflow-relay"), Value: pos}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	out, err = runCLI(t, cfg, "purge", "--dry-run")
	if err != nil || !strings.Contains(out, "room_outbox                    5") || !strings.Contains(out, "delivered, id < 6") {
		t.Fatalf("purge --dry-run: %v\n%s", err, out)
	}
	out, err = runCLI(t, cfg, "purge")
	if err != nil {
		t.Fatalf("purge: %v\n%s", err, out)
	}
	var left, lowest int
	if err := m.DB.QueryRow("SELECT COUNT(*), MIN(id) FROM room_outbox").Scan(&left, &lowest); err != nil || left != 7 || lowest != 6 {
		t.Fatalf("room_outbox keeps %d rows from id %d (%v), want 7 from the relay's open hole 6\n%s", left, lowest, err, out)
	}

	// Windows shorter than the topics' retention are refused by key.
	_, err = runCLI(t, cfg+"  lucky_event_consumption: 100h\n", "purge")
	if err == nil || !strings.Contains(err.Error(), "config: purge.lucky_event_consumption: must be at least the Kafka retention") {
		t.Fatalf("a window below kafka.topic_retention: %v", err)
	}
	_, err = runCLI(t, strings.Replace(cfg, "  topics:\n", "  topic_retention: 1000h\n  topics:\n", 1), "config")
	if err == nil || !strings.Contains(err.Error(), "config: purge.user_mic_event_consumption: ") {
		t.Fatalf("roomflow config with kafka.topic_retention above the windows: %v", err)
	}
	adm := kadm.NewClient(k.Client(t))
	alter := func(topic, retentionMs string) {
		t.Helper()
		rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: kadm.StringPtr(retentionMs)}}, topic)
		if err == nil {
			_, err = rs.On(topic, nil)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// 600h of retention.ms is below the 720h window, but with the 7 days
	// of segment.ms a record may live 768h.
	alter(k.Config.Topics.LuckyEvents, strconv.Itoa(600*3600*1000))
	_, err = runCLI(t, cfg, "purge")
	if err == nil || !strings.Contains(err.Error(), "config: purge.lucky_event_consumption: must be at least the Kafka retention of the topics it dedupes (768h0m0s, got 720h0m0s)") {
		t.Fatalf("purge with lucky_events kept 600h + a 168h segment: %v", err)
	}
	alter(k.Config.Topics.LuckyEvents, strconv.Itoa(168*3600*1000))
	alter(k.Config.Topics.LuckyPoolInflow, "-1")
	_, err = runCLI(t, cfg, "purge")
	if err == nil || !strings.Contains(err.Error(), "config: purge.lucky_pool_inflow_consumption: must be 0: the topics this table dedupes keep their records forever") ||
		strings.Contains(err.Error(), "purge.user_mic_event_consumption") {
		t.Fatalf("purge with lucky_pool_inflow kept forever on the brokers: %v", err)
	}
}

// The purge CronJob runs `roomflow purge` with flags it accepts, is listed
// in the kustomization, never overlaps itself, and its pod passes the
// restricted Pod Security Standard.
func TestPurgeCronJob(t *testing.T) {
	raw, err := os.ReadFile("../../../deploy/kubernetes/cronjob-purge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	type secCtx struct {
		RunAsNonRoot             *bool  `yaml:"runAsNonRoot"`
		RunAsUser                *int64 `yaml:"runAsUser"`
		RunAsGroup               *int64 `yaml:"runAsGroup"`
		AllowPrivilegeEscalation *bool  `yaml:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   *bool  `yaml:"readOnlyRootFilesystem"`
		Capabilities             struct {
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
		SeccompProfile struct {
			Type string `yaml:"type"`
		} `yaml:"seccompProfile"`
	}
	var doc struct {
		Kind string `yaml:"kind"`
		Spec struct {
			ConcurrencyPolicy string `yaml:"concurrencyPolicy"`
			JobTemplate       struct {
				Spec struct {
					Template struct {
						Spec struct {
							ServiceAccountName           string `yaml:"serviceAccountName"`
							AutomountServiceAccountToken *bool  `yaml:"automountServiceAccountToken"`
							SecurityContext              secCtx `yaml:"securityContext"`
							Containers                   []struct {
								Args            []string `yaml:"args"`
								SecurityContext secCtx   `yaml:"securityContext"`
							} `yaml:"containers"`
						} `yaml:"spec"`
					} `yaml:"template"`
				} `yaml:"spec"`
			} `yaml:"jobTemplate"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	ps := doc.Spec.JobTemplate.Spec.Template.Spec
	if doc.Kind != "CronJob" || doc.Spec.ConcurrencyPolicy != "Forbid" || len(ps.Containers) != 1 {
		t.Fatalf("%+v", doc)
	}
	if ps.ServiceAccountName != "roomflow" || ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken {
		t.Errorf("service account %q, automount %v: want roomflow without a token", ps.ServiceAccountName, ps.AutomountServiceAccountToken)
	}
	c := ps.Containers[0]
	cmd, args, err := NewRoot().Find(c.Args)
	if err != nil || cmd.Name() != "purge" || cmd.ParseFlags(args) != nil {
		t.Errorf("container args %v: %v", c.Args, err)
	}
	for _, sc := range []secCtx{ps.SecurityContext, c.SecurityContext} {
		if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser != 65532 || sc.SeccompProfile.Type != "RuntimeDefault" {
			t.Errorf("security context %+v: want runAsNonRoot, runAsUser 65532, seccomp RuntimeDefault", sc)
		}
	}
	sc := c.SecurityContext
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		!slices.Equal(sc.Capabilities.Drop, []string{"ALL"}) {
		t.Errorf("container security context %+v: want no privilege escalation, a read-only root, drop ALL", sc)
	}
	kust, err := os.ReadFile("../../../deploy/kubernetes/kustomization.yaml")
	if err != nil || !strings.Contains(string(kust), "- cronjob-purge.yaml\n") {
		t.Errorf("kustomization.yaml does not list cronjob-purge.yaml (%v)", err)
	}
}
