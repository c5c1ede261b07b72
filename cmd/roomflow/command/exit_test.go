package command

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hyapp/roomflow/internal/cli"
	"github.com/hyapp/roomflow/internal/testenv"
)

// TestMain runs Main itself, with the arguments after the test binary's
// name, when GO_WANT_HELPER_PROCESS=1: the exit status tests run the real
// Main (exiting with its status, as main does) in a child process without
// building the binary.
func TestMain(m *testing.M) {
	if os.Getenv("GO_WANT_HELPER_PROCESS") == "1" {
		os.Args = append([]string{"roomflow"}, os.Args[1:]...)
		os.Exit(Main())
	}
	os.Exit(m.Run())
}

// roomflowCmd is `roomflow args...` run by main in a child process.
func roomflowCmd(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	env := []string{"GO_WANT_HELPER_PROCESS=1", "ROOMFLOW_METRICS_ADDR=-"}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ROOMFLOW_") && !strings.HasPrefix(kv, "GO_WANT_HELPER_PROCESS=") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	return cmd
}

func exitStatus(t *testing.T, err error) int {
	t.Helper()
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("run: %v", err)
	}
	return ee.ExitCode()
}

// Exit status 2 for usage and config mistakes, 1 for run-time failures.
func TestExitCodes(t *testing.T) {
	unreachable := "mysql:\n  dsn: \"root@tcp(" + testenv.ClosedAddr(t) + ")/roomflow\"\nkafka:\n  brokers: [\"" + testenv.ClosedAddr(t) + "\"]\n"
	confluentNoRegistry := unreachable + "  public_wire_format: confluent\n"
	cases := []struct {
		name   string
		config string // written to a file passed with --config; "" none
		args   []string
		code   int
		stderr string
	}{
		{"unknown command", "", []string{"bogus"}, cli.ExitUsage, `unknown command "bogus" for "roomflow"`},
		{"unknown subcommand of a group", "", []string{"lucky", "pools", "bogus"}, cli.ExitUsage, `unknown command "bogus" for "roomflow lucky pools"`},
		{"unknown flag", "", []string{"relay", "--no-such-flag"}, cli.ExitUsage, "unknown flag: --no-such-flag"},
		{"bad flag value", "", []string{"kfake", "--brokers", "many"}, cli.ExitUsage, "invalid argument"},
		{"argument to a command without any", "", []string{"config", "extra"}, cli.ExitUsage, `unknown command "extra"`},
		{"missing config file", "", []string{"--config", "/nonexistent/roomflow.yaml", "config"}, cli.ExitUsage, "/nonexistent/roomflow.yaml"},
		{"unknown config key", "relay:\n  batch_sise: 3\n", []string{"config"}, cli.ExitUsage, "relay.batch_sise: unknown key"},
		{"wrong type", "sink:\n  batch_size: lots\n", []string{"config"}, cli.ExitUsage, "sink.batch_size"},
		{"bad duration", "relay:\n  poll_interval: soon\n", []string{"config"}, cli.ExitUsage, "relay.poll_interval"},
		{"invalid app-wide value", "mysql:\n  max_open_conns: -5\n", []string{"config"}, cli.ExitUsage, "mysql.max_open_conns"},
		// A component's own keys are validated when it starts, before it
		// connects to anything.
		{"invalid component value", unreachable + "relay:\n  batch_size: -1\n", []string{"relay"}, cli.ExitUsage, "relay.batch_size"},
		{"redrive without a choice", unreachable, []string{"dlq", "redrive"}, cli.ExitUsage, "choose letters"},
		{"redrive with bad offsets", unreachable, []string{"dlq", "redrive", "--offsets", "x"}, cli.ExitUsage, "is not partition:offset"},
		// lucky.fairness.key is the draw service's, checked at its start.
		{"commit_reveal without a fairness key", unreachable + "lucky:\n  audit_key: k\n  randomness: commit_reveal\n", []string{"lucky"},
			cli.ExitUsage, "lucky.fairness.key: is required"},
		{"bad old fairness key", unreachable + "lucky:\n  audit_key: k\n  fairness:\n    key: " + strings.Repeat("A", 43) + "=\n    old_keys: [short]\n",
			[]string{"lucky"}, cli.ExitUsage, "lucky.fairness.old_keys[0]: must be 32 bytes"},
		{"bad randomness", "lucky:\n  randomness: fair\n", []string{"config"}, cli.ExitUsage, "lucky.randomness: must be crypto or commit_reveal"},
		{"config does not check the fairness key", "lucky:\n  randomness: commit_reveal\n", []string{"config"}, 0, ""},
		{"runtime failure", unreachable, []string{"migrate"}, cli.ExitFailure, "connection refused"},
		{"unknown public wire format", "kafka:\n  public_wire_format: avro\n", []string{"config"}, cli.ExitUsage, "kafka.public_wire_format: must be plain or confluent"},
		// confluent without a registry: refused by the writers at their
		// start, naming both keys, not by config (readers need none).
		{"confluent without a registry, config", "kafka:\n  public_wire_format: confluent\n", []string{"config"}, 0, ""},
		{"confluent without a registry, a writer", confluentNoRegistry, []string{"process"}, cli.ExitUsage,
			"kafka.public_wire_format: is confluent but schema_registry.url is not set"},
		{"confluent without a registry, lucky", confluentNoRegistry + "lucky:\n  audit_key: k\n", []string{"lucky"}, cli.ExitUsage,
			"kafka.public_wire_format: is confluent but schema_registry.url is not set"},
		{"confluent without a registry, totals bootstrap", confluentNoRegistry, []string{"totals", "bootstrap"}, cli.ExitUsage,
			"kafka.public_wire_format: is confluent but schema_registry.url is not set"},
		// `roomflow run` checks every component's keys before any of them
		// connects: publish-im's missing IM credentials, not relay's
		// unreachable MySQL.
		{"run, a later component's key", unreachable, []string{"run"}, cli.ExitUsage, "im.secret_key"},
		{"bad --only", unreachable, []string{"process", "--only", "both"}, cli.ExitUsage, "--only: must be room or mic"},
		{"--resnapshot in poll mode", unreachable, []string{"relay", "--resnapshot"}, cli.ExitUsage, "--resnapshot: only with relay.mode binlog"},
		{"lucky without a listener", unreachable + "lucky:\n  audit_key: k\n  grpc_addr: \"\"\n", []string{"lucky"}, cli.ExitUsage, "lucky.grpc_addr"},
		{"lucky with a bad listen address", unreachable + "lucky:\n  audit_key: k\n  grpc_addr: \"13006\"\n", []string{"lucky"}, cli.ExitUsage, "lucky.grpc_addr"},
		{"api without a listener", unreachable + "api:\n  addr: \"\"\n  app_addr: \"\"\n  grpc_addr: \"\"\n", []string{"api"}, cli.ExitUsage, "nothing to serve"},
		{"success", "", []string{"config"}, 0, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.config != "" {
				args = append([]string{"--config", testenv.WriteConfig(t, tc.config)}, args...)
			}
			cmd := roomflowCmd(t, args...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			cmd.Stdout = io.Discard
			code := exitStatus(t, cmd.Run())
			if code != tc.code || !strings.Contains(stderr.String(), tc.stderr) {
				t.Fatalf("exit %d, want %d; stderr %q, want it to contain %q", code, tc.code, stderr.String(), tc.stderr)
			}
		})
	}
}

// A clean stop on SIGTERM exits 0.
func TestExitCodeSIGTERM(t *testing.T) {
	cmd := roomflowCmd(t, "kfake", "--listen", "127.0.0.1:0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	started := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		ok := false
		for sc.Scan() {
			if strings.Contains(sc.Text(), "kfake listening") && !ok {
				ok = true
				started <- true
			}
		}
		if !ok {
			started <- false
		}
	}()
	select {
	case ok := <-started:
		if !ok {
			_ = cmd.Wait()
			t.Fatalf("kfake did not start: %s", stderr.String())
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatal("kfake did not start within 30s")
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if code := exitStatus(t, err); code != 0 {
			t.Fatalf("exit %d after SIGTERM, want 0; stderr %q", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("no exit within 30s of SIGTERM")
	}
}

// TestRefusedGroupExitsOne: `roomflow sink` whose consumer group the
// broker refuses for good (no group ACL: kfake answers its JoinGroups
// GROUP_AUTHORIZATION_FAILED) exits by itself, status 1, naming the group
// and the broker's error, instead of running on ready and idle.
func TestRefusedGroupExitsOne(t *testing.T) {
	k := testenv.NewKafka(t, testenv.Partitions(1))
	if k.Fake == nil {
		t.Skip("needs kfake: the refusal is an injected answer")
	}
	m := testenv.NewMySQL(t)
	group := testenv.UniqueName(t)
	k.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.JoinGroup}, Group: group, Err: kerr.GroupAuthorizationFailed, Count: -1})
	cfg := testenv.WriteConfig(t, "log:\n  level: error\napp_code: hyapp\nmysql:\n  dsn: \""+m.DSN+"\"\n"+k.ConfigYAML(1)+"sink:\n  group: "+group+"\n")
	cmd := roomflowCmd(t, "--config", cfg, "sink", "--owner-id", "refused")
	stderr := &testenv.SyncBuffer{}
	cmd.Stderr, cmd.Stdout = stderr, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	want := "roomflow: sink: the broker refuses consumer group " + group + ": GROUP_AUTHORIZATION_FAILED"
	select {
	case err := <-done:
		if code := exitStatus(t, err); code != cli.ExitFailure || !strings.Contains(stderr.String(), want) {
			t.Fatalf("exit %d, want %d; stderr %q, want it to contain %q", code, cli.ExitFailure, stderr.String(), want)
		}
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("roomflow sink still running 20s after the broker refused its group; stderr %q", stderr.String())
	}
}
