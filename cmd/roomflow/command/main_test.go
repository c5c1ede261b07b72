package command

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/cli"
	"github.com/hyapp/roomflow/internal/migrate"
	"github.com/hyapp/roomflow/internal/testenv"
)

// runCLI runs the command tree in-process with args and a config file.
func runCLI(t *testing.T, cfgYAML string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return runCLIContext(t, ctx, cfgYAML, args...)
}

// runCLIContext is runCLI until ctx ends (a long-running command's stop).
func runCLIContext(t *testing.T, ctx context.Context, cfgYAML string, args ...string) (string, error) {
	t.Helper()
	p := testenv.WriteConfig(t, cfgYAML)
	root := NewRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append([]string{"--config", p}, args...))
	err := root.ExecuteContext(ctx)
	return out.String(), err
}

func TestMigrateCommand(t *testing.T) {
	m := testenv.NewEmptyMySQL(t)
	cfg := "mysql:\n  dsn: \"" + m.DSN + "\"\nlog:\n  level: error\n"
	all, err := migrate.Load()
	if err != nil {
		t.Fatal(err)
	}
	out, err := runCLI(t, cfg, "migrate")
	if err != nil || !strings.Contains(out, fmt.Sprintf("(%d applied now)", len(all))) {
		t.Fatalf("first migrate: %v %q, want all %d migrations applied", err, out, len(all))
	}
	out, err = runCLI(t, cfg, "migrate")
	if err != nil || !strings.Contains(out, "(0 applied now)") {
		t.Fatalf("second migrate: %v %q", err, out)
	}
}

func TestTopicsCommand(t *testing.T) {
	k := testenv.NewKafka(t, testenv.NoTopics())
	prefix := strings.TrimSuffix(k.Config.Topics.RoomEvents, "hyapp.room.events.v1")
	out, err := runCLI(t, k.ConfigYAML(3), "topics")
	if err != nil || strings.Count(out, prefix) != len(k.Config.Topics.List()) || !strings.Contains(out, "true") {
		t.Fatalf("topics: %v\n%s", err, out)
	}
	if _, err := runCLI(t, k.ConfigYAML(3), "topics"); err != nil {
		t.Fatalf("second run must pass: %v", err)
	}
	_, err = runCLI(t, k.ConfigYAML(8), "topics")
	if err == nil || !strings.Contains(err.Error(), "has 3 partitions, kafka.partitions is 8") {
		t.Fatalf("mismatch must be an error: %v", err)
	}
}

func TestConfigCommand(t *testing.T) {
	out, err := runCLI(t, "mysql:\n  dsn: \"app:pw123456@tcp(db:3306)/rf\"\nim:\n  secret_key: verysecret\n", "config")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "pw123456") || strings.Contains(out, "verysecret") || !strings.Contains(out, "REDACTED") {
		t.Fatalf("secrets not redacted:\n%s", out)
	}
	if !strings.Contains(out, "batch_size: 1000") || !strings.Contains(out, "retry_strategy: fixed_interval") {
		t.Fatalf("defaults missing:\n%s", out)
	}
	// config checks every component that needs no secret, naming the key
	// (roomflow lucky's audit key is checked where it runs).
	for yaml, key := range map[string]string{
		"relay:\n  batch_size: -5\n":         "relay.batch_size",
		"mic:\n  day_room_retention: 1h\n":   "mic.day_room_retention",
		"process:\n  commit_records: -1\n":   "process.commit_records",
		"sink:\n  max_retries: -1\n":         "sink.max_retries",
		"api:\n  user_header: \"X User\"\n":  "api.user_header",
		"lucky:\n  outbox_max_retries: -2\n": "lucky.outbox_max_retries",
	} {
		if _, err := runCLI(t, yaml, "config"); err == nil || !strings.Contains(err.Error(), "config: "+key+": ") {
			t.Errorf("config with a bad %s: %v, want an error naming it", key, err)
		}
	}
	// An unknown lucky.outbox_format is a configuration error: exit 2.
	if _, err := runCLI(t, "lucky:\n  outbox_format: draw-events\n", "config"); cli.ExitCode(err) != 2 ||
		!strings.Contains(err.Error(), "config: lucky.outbox_format: ") {
		t.Errorf("config with lucky.outbox_format draw-events: %v (exit %d), want exit 2 naming the key", err, cli.ExitCode(err))
	}
}

func TestEveryCommandHasHelp(t *testing.T) {
	for _, c := range NewRoot().Commands() {
		if c.Name() == "help" || c.Name() == "completion" {
			continue
		}
		if c.Short == "" || len(c.Long) < 40 {
			t.Errorf("%s: needs Short and a real Long help text", c.Name())
		}
	}
}

// loadgen --live writes every row once the clock reaches its occurred_at,
// and its oracle closes every session (the abandoned ones by the mic
// timers of the config).
func TestLoadgenLive(t *testing.T) {
	m := testenv.NewMySQL(t)
	cfg := "mysql:\n  dsn: \"" + m.DSN + "\"\nlog:\n  level: error\nmic:\n  pending_publish_max_age: 3s\n  publishing_session_max_age: 3s\n"
	out, err := runCLI(t, cfg, "loadgen", "--live", "--span", "2s", "--sessions", "20", "--gifts", "10", "--users", "30",
		"--abandoned", "0.5", "--id-prefix", "live")
	if err != nil || !strings.Contains(out, "20 closed mic sessions (0 open)") {
		t.Fatalf("loadgen --live: %v\n%s", err, out)
	}
	var rows, early int
	if err := m.DB.QueryRow("SELECT COUNT(*), COALESCE(SUM(created_at_ms < occurred_at_ms), 0) FROM room_outbox").Scan(&rows, &early); err != nil {
		t.Fatal(err)
	}
	if rows == 0 || early != 0 || !strings.Contains(out, "wrote "+strconv.Itoa(rows)+" events") {
		t.Fatalf("%d rows, %d written before their occurred_at; output:\n%s", rows, early, out)
	}
}

// The root help lists every environment override internal/config reads,
// so an operator finds the secret ones (passwords, keys) without the source.
func TestRootHelpNamesEveryEnvOverride(t *testing.T) {
	src, err := os.ReadFile("../../../internal/config/config.go")
	if err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile(`"(ROOMFLOW_[A-Z0-9_]+)"`).FindAllStringSubmatch(string(src), -1)
	if len(names) < 10 {
		t.Fatalf("found %d ROOMFLOW_* names in config.go; the pattern no longer matches", len(names))
	}
	help := NewRoot().Long
	for _, m := range names {
		if !strings.Contains(help, m[1]) {
			t.Errorf("root help does not name %s, which internal/config reads", m[1])
		}
	}
}
