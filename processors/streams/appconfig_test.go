package streams

import (
	"testing"

	"github.com/hyapp/roomflow/internal/config"
)

// A processor's runtime takes the app-wide keys; --instance-id makes its
// transactional id "<group>-<id>" and its member "<id>-<name>".
func TestConfigFrom(t *testing.T) {
	app := config.Default()
	own := Config{Name: "room", Group: "g", Input: "in"}
	c := ConfigFrom(&app, own, "")
	if c.Name != "room" || c.Group != "g" || c.Input != "in" || c.DLQ != app.Kafka.Topics.DLQ ||
		c.CommitInterval != app.Process.CommitInterval.D() || c.CommitRecords != app.Process.CommitRecords ||
		c.ShutdownTimeout != app.Shutdown.Timeout.D() || c.Kafka.SessionTimeout != app.Kafka.SessionTimeout.D() ||
		c.TransactionalID != "" || c.InstanceID != "" {
		t.Fatalf("without --instance-id: %+v", c)
	}
	if c := ConfigFrom(&app, own, "pod-1"); c.TransactionalID != "g-pod-1" || c.InstanceID != "pod-1-room" {
		t.Fatalf("with --instance-id: %+v", c)
	}
	keys := AppKeys("kafka.topics.x", "process.x_group", map[string]string{"app_code": "app_code"})
	if keys["runtime.input"] != "kafka.topics.x" || keys["runtime.group"] != "process.x_group" || keys["app_code"] != "app_code" ||
		keys["runtime.commit_interval"] != "process.commit_interval" {
		t.Errorf("keys %v", keys)
	}
}
