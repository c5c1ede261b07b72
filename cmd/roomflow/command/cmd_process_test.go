package command

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/app"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/processors/room/roomtest"
	"github.com/hyapp/roomflow/processors/streams/rttest"
)

// TestProcessCommand runs `roomflow process --only room` in-process: mic
// events are re-keyed into the user topic, and cancelling the context
// (SIGTERM) stops it cleanly. An unknown --only value is refused.
func TestProcessCommand(t *testing.T) {
	k := testenv.NewKafka(t, testenv.Partitions(3))
	m := testenv.NewMySQL(t)
	var b strings.Builder
	b.WriteString("log:\n  level: error\nmetrics:\n  addr: \"\"\n")
	b.WriteString("mysql:\n  dsn: \"" + m.DSN + "\"\n")
	b.WriteString(k.ConfigYAML(3))
	b.WriteString("process:\n  room_group: " + testenv.UniqueName(t) + "\n  commit_interval: 50ms\n")
	p := testenv.WriteConfig(t, b.String())

	root := NewRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"--config", p, "process", "--only", "bogus"})
	if err := root.ExecuteContext(context.Background()); err == nil || !strings.Contains(err.Error(), "--only") {
		t.Fatalf("--only bogus: %v", err)
	}

	w := roomtest.Mic(300, 10, 50, 5)
	rttest.Produce(t, k.Client(t), w.Records(k.Config.Topics.RoomEvents))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		root := NewRoot()
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs([]string{"--config", p, "process", "--only", "room", "--instance-id", "test-1"})
		done <- root.ExecuteContext(ctx)
	}()
	got := rttest.ReadCommitted(t, k.Brokers, k.Config.Topics.UserMicEvents, len(w.Events), 500*time.Millisecond, 60*time.Second)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("process after cancel: %v (%s)", err, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("process did not stop on cancel")
	}
	if len(got) != len(w.Events) {
		t.Fatalf("%d mic events re-keyed, want %d", len(got), len(w.Events))
	}
}

// A command's flags must not outlive its command tree: after `process
// --only bogus` was parsed in this binary, the process component that
// `roomflow run` and the demo build still starts both processors. (The
// flags once lived in package variables, so TestProcessCommand's --only
// room silently dropped the mic processor from TestPipelineEndToEnd.)
func TestCommandFlagsDoNotLeak(t *testing.T) {
	m := testenv.NewMySQL(t)
	cfgYAML := "log:\n  level: error\nmetrics:\n  addr: \"\"\nmysql:\n  dsn: \"" + m.DSN + "\"\n"
	if _, err := runCLI(t, cfgYAML, "process", "--only", "bogus"); err == nil || !strings.Contains(err.Error(), "--only") {
		t.Fatalf("--only bogus: %v", err)
	}
	cfg, err := config.Load(testenv.WriteConfig(t, cfgYAML), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	d := newDeps(cfg, slog.New(slog.DiscardHandler))
	defer d.Close()
	var process app.Spec
	for _, s := range components() {
		if s.Name == "process" {
			process = s
		}
	}
	if _, err := process.New(context.Background(), d); err != nil {
		t.Fatalf("the process component of a later command tree: %v", err)
	}
	// Both processors registered their readiness (neither has started).
	notReady := fmt.Sprint(d.Health.Ready())
	if !strings.Contains(notReady, "room-processor") || !strings.Contains(notReady, "mic-processor") {
		t.Fatalf("want the room and the mic processor, readiness says %q", notReady)
	}
}
