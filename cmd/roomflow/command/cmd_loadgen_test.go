package command

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/app"
	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/schemas/envelope"
)

// A 20-second load test into room_outbox with every fault MySQL mode
// takes (malformed rows, late commits), relayed and processed by the
// running pipeline (IM delivery off), ends with verify finding 0
// differences, its own (--verify, in the report) and the command's; the
// malformed rows are each dead-lettered.
func TestLoadgenDurationToMySQL(t *testing.T) {
	report := filepath.Join(t.TempDir(), "run.md")
	malformed := testLoadRun(t, "mysql", "--malformed-share", "0.02", "--late-commit-share", "0.03", "--late-commit-hold", "500ms",
		"--report", report, "--settle", "10s", "--verify")
	md, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Throughput", "run-rate.svg", "late commits (held 500ms)", fmt.Sprintf("| DLQ | %d records |", malformed), "## Verify\n\n0 differences."} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if svg, err := os.ReadFile(strings.TrimSuffix(report, ".md") + "-rate.svg"); err != nil || !strings.Contains(string(svg), "<svg") {
		t.Errorf("rate chart: %v", err)
	}
}

// The same into the room events topic with every fault Kafka mode takes
// (malformed records, redelivered records).
func TestLoadgenDurationToKafka(t *testing.T) {
	testLoadRun(t, "kafka", "--malformed-share", "0.02", "--redelivery-share", "0.05")
}

// The two runs wait mostly on the clock: they run side by side.
func testLoadRun(t *testing.T, to string, faults ...string) (malformed int) {
	t.Parallel()
	k := testenv.NewKafka(t, testenv.Partitions(3))
	m := testenv.NewMySQL(t)
	u := testenv.UniqueName(t)
	cfgYAML := "log:\n  level: error\nmetrics:\n  addr: \"\"\napi:\n  addr: \"\"\n  app_addr: \"\"\n  grpc_addr: \"\"\nmysql:\n  dsn: \"" + m.DSN + "\"\n" + k.ConfigYAML(3) +
		"relay:\n  poll_interval: 20ms\n  gap_max_age: 30s\n  transactional_id: " + u + "-relay\n" +
		"process:\n  commit_interval: 100ms\n  room_group: " + u + "-room\n  mic_group: " + u + "-mic\n" +
		"sink:\n  group: " + u + "-sink\n" +
		"mic:\n  pending_publish_max_age: 6s\n  publishing_session_max_age: 9s\n  compensation_interval: 250ms\n"
	cfg, err := config.Load(testenv.WriteConfig(t, cfgYAML), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	// The pipeline but the IM publisher: relay, processors, sink.
	d := newDeps(cfg, slog.New(slog.DiscardHandler))
	defer d.Close()
	var specs []app.Spec
	for _, s := range components() {
		if s.Name == "relay" || s.Name == "process" || s.Name == "sink" {
			specs = append(specs, s)
		}
	}
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- app.Run(ctx, d, specs) }()
	defer func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("pipeline: %v", err)
		}
	}()

	lctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // --verify waits for the mic max ages
	defer cancel()
	out, err := runCLIContext(t, lctx, cfgYAML, append([]string{"loadgen", "--to", to, "--duration", "20s", "--rate", "150", "--ramp", "3s",
		"--writers", "3", "--batch", "20", "--rooms", "30", "--users", "300", "--session-median", "2s", "--session-p99", "6s",
		"--publish-failure-share", "0.1", "--abandoned", "0.05", "--id-prefix", u}, faults...)...)
	if err != nil {
		t.Fatalf("loadgen: %v\n%s", err, out)
	}
	t.Log(out)
	written := scanInt(t, out, `wrote (\d+) events`)
	malformed = scanInt(t, out, `faults: (\d+) malformed rows`)
	if written < 2000 || malformed == 0 || strings.Contains(out, " 0 late commits") != (to == "kafka") || strings.Contains(out, " 0 redelivered") != (to == "mysql") {
		t.Fatalf("a 20 s run at 150/s with its faults:\n%s", out)
	}

	// verify --timers once the mic timers closed what the run left open.
	var vout string
	for deadline := time.Now().Add(45 * time.Second); ; time.Sleep(time.Second) {
		if vout, err = runCLI(t, cfgYAML, "verify", "--timers", "--idle", "1s"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("verify after the run: %v\n%s", err, vout)
		}
	}
	if !regexp.MustCompile(`compared [1-9]\d* lifetime, [1-9]\d* daily, [1-9]\d* session, [1-9]\d* pool rows \(0 users with open sessions skipped\): 0 differences`).MatchString(vout) {
		t.Fatalf("verify:\n%s", vout)
	}
	dead := 0
	for _, r := range k.DrainCommitted(t, k.Config.Topics.DLQ) {
		if l, err := envelope.ParseDeadLetter(r); err == nil && l.Reason == "decode_envelope" {
			dead++
		}
	}
	if dead != malformed {
		t.Fatalf("%d records dead-lettered as decode_envelope, want the %d malformed rows", dead, malformed)
	}
	return malformed
}

func scanInt(t *testing.T, out, pattern string) int {
	t.Helper()
	m := regexp.MustCompile(pattern).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no %q in:\n%s", pattern, out)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// loadgen --duration refuses what its Load does not take, naming the flag.
func TestLoadgenDurationFlags(t *testing.T) {
	m := testenv.NewMySQL(t)
	cfgYAML := "mysql:\n  dsn: \"" + m.DSN + "\"\nlog:\n  level: error\nrelay:\n  gap_max_age: 5s\n"
	for _, tc := range []struct {
		args []string
		keys []string
	}{
		{[]string{"--redelivery-share", "0.1"}, []string{"--redelivery-share"}},
		{[]string{"--to", "kafka", "--late-commit-share", "0.1"}, []string{"--late-commit-share"}},
		{[]string{"--hot-room-skew", "0.9", "--writers", "0"}, []string{"--writers", "--hot-room-skew"}},
		{[]string{"--session-p99", "1m", "--session-median", "2m"}, []string{"--session-p99"}},
		{[]string{"--late-commit-share", "0.1", "--late-commit-hold", "5s"}, []string{"--late-commit-hold"}},
	} {
		_, err := runCLI(t, cfgYAML, append([]string{"loadgen", "--duration", "1s"}, tc.args...)...)
		if got := cfgerr.Keys(err); fmt.Sprint(got) != fmt.Sprint(tc.keys) || !cfgerr.IsUsage(err) {
			t.Errorf("%v: %v (keys %v), want a usage error naming %v", tc.args, err, got, tc.keys)
		}
	}
}
