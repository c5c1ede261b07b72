package command

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/cli"
	"github.com/hyapp/roomflow/internal/testenv"
)

// sigtermWhileStarting runs `roomflow args...` with cfg, sends SIGTERM once
// waiting is closed (the component is in the wait) and wants exit 0 within
// 5s: a rollout replacing a pod that is still starting is a clean stop.
func sigtermWhileStarting(t *testing.T, cfg string, waiting <-chan struct{}, args ...string) {
	t.Helper()
	cmd := roomflowCmd(t, append([]string{"--config", testenv.WriteConfig(t, cfg)}, args...)...)
	stderr := &testenv.SyncBuffer{}
	cmd.Stderr, cmd.Stdout = stderr, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-waiting:
	case err := <-done:
		t.Fatalf("exited (%v) before it waited; stderr %q", err, stderr.String())
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("never reached the wait; stderr %q", stderr.String())
	}
	time.Sleep(200 * time.Millisecond) // well inside the wait
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if code := exitStatus(t, err); code != 0 {
			t.Fatalf("exit %d after SIGTERM while starting, want 0; stderr %q", code, stderr.String())
		}
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("still running 5s after SIGTERM while starting; stderr %q", stderr.String())
	}
}

// A MySQL that accepts and never answers (a half-dead server, a
// blackholing proxy): SIGTERM during the ping stops at once, exit 0.
func TestSIGTERMWhileWaitingForMySQL(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	waiting := make(chan struct{})
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		close(waiting)
		_, _ = io.Copy(io.Discard, c)
	}()
	sigtermWhileStarting(t, "log:\n  level: error\nmysql:\n  dsn: \"root@tcp("+ln.Addr().String()+")/roomflow\"\n", waiting, "relay")
}

// A registry that does not know the public schemas yet (the migrate Job
// has not registered them): the writer waits, not ready; SIGTERM then
// stops it at once, exit 0.
func TestSIGTERMWhileWaitingForSchemaIDs(t *testing.T) {
	waiting := make(chan struct{})
	var once sync.Once
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		once.Do(func() { close(waiting) })
		http.Error(w, `{"error_code":40401,"message":"Subject not found"}`, http.StatusNotFound)
	}))
	defer reg.Close()
	sigtermWhileStarting(t, "log:\n  level: error\nkafka:\n  brokers: [\""+testenv.ClosedAddr(t)+"\"]\n  public_wire_format: confluent\n"+
		"schema_registry:\n  url: "+reg.URL+"\n", waiting, "process", "--only", "mic")
}

// `roomflow run`, every component started and ready, stops on SIGTERM
// with exit 0 within shutdown.timeout, idle or in the middle of traffic
// (loadgen writing room_outbox), and its logs, at debug, never hold a
// secret.
func TestRunStopsCleanly(t *testing.T) {
	t.Run("idle", func(t *testing.T) { testRunStopsCleanly(t, false) })
	t.Run("under load", func(t *testing.T) { testRunStopsCleanly(t, true) })
}

func testRunStopsCleanly(t *testing.T, load bool) {
	k := testenv.NewKafka(t, testenv.Partitions(2))
	m := testenv.NewMySQL(t)
	im := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"ActionStatus":"OK","ErrorCode":0}`)
	}))
	defer im.Close()
	const imSecret, registrySecret = "im-secret-never-logged", "registry-secret-never-logged"
	metrics := testenv.ClosedAddr(t)
	cfg := "log:\n  level: debug\nshutdown:\n  timeout: 3s\napp_code: hyapp\n" +
		"mysql:\n  dsn: \"" + m.DSN + "\"\n" + k.ConfigYAML(2) +
		"api:\n  addr: \"\"\n  app_addr: \"\"\n  grpc_addr: \"\"\n" +
		"im:\n  endpoint: " + im.URL + "\n  sdk_app_id: 1400000000\n"
	if _, err := runCLI(t, cfg, "migrate"); err != nil {
		t.Fatal(err)
	}
	if _, err := runCLI(t, cfg, "topics"); err != nil {
		t.Fatal(err)
	}
	// A registry with a password (plain wire format: never called).
	cfg += "schema_registry:\n  url: http://" + testenv.ClosedAddr(t) + "\n  user: roomflow\n"
	cmd := roomflowCmd(t, "--config", testenv.WriteConfig(t, cfg), "run", "--instance-id", "pod-run")
	cmd.Env = append(cmd.Env, "ROOMFLOW_METRICS_ADDR="+metrics, "ROOMFLOW_IM_SECRET_KEY="+imSecret,
		"ROOMFLOW_SCHEMA_REGISTRY_PASSWORD="+registrySecret)
	stderr := &testenv.SyncBuffer{}
	cmd.Stderr, cmd.Stdout = stderr, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		<-done
	}()
	readyz := func() int {
		resp, err := http.Get("http://" + metrics + "/readyz")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	testenv.Eventually(t, 60*time.Second, "roomflow run ready", func() bool { return readyz() == http.StatusOK })
	if load {
		ctx, cancel := context.WithCancel(context.Background())
		loaded := make(chan struct{})
		go func() {
			defer close(loaded)
			_, _ = runCLIContext(t, ctx, cfg, "loadgen", "--duration", "20s", "--rate", "2000", "--id-prefix", "stop")
		}()
		defer func() { cancel(); <-loaded }()
		var rows int
		testenv.Eventually(t, 30*time.Second, "traffic relayed", func() bool {
			return m.DB.QueryRow("SELECT COUNT(*) FROM room_outbox").Scan(&rows) == nil && rows > 2000
		})
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		done <- err // for the deferred kill
		if code := exitStatus(t, err); code != 0 {
			t.Fatalf("exit %d after SIGTERM, want 0; output %s", code, stderr.String())
		}
	case <-time.After(3*time.Second + 10*time.Second):
		t.Fatalf("roomflow run did not stop within shutdown.timeout + 10s; output %s", stderr.String())
	}
	for _, secret := range []string{imSecret, registrySecret} {
		if strings.Contains(stderr.String(), secret) {
			t.Errorf("a secret in roomflow run's logs: %s", stderr.String())
		}
	}
}

// metrics.addr on a port the process also serves (an api.* listener,
// lucky.grpc_addr) is a config mistake: exit 2 naming the key before
// anything connects, and `roomflow config` finds it; not exit 1 at the
// second bind, after MySQL and Kafka.
func TestMetricsAddrClash(t *testing.T) {
	port := testenv.ClosedAddr(t)
	base := "log:\n  level: error\nmysql:\n  dsn: \"root@tcp(" + testenv.ClosedAddr(t) + ")/roomflow\"\nmetrics:\n  addr: \"" + port + "\"\n"
	for _, tc := range []struct{ yaml, cmd, key string }{
		{"api:\n  addr: \"" + port + "\"\n  app_addr: \"\"\n  grpc_addr: \"\"\n", "api", "api.addr"},
		{"api:\n  app_addr: \"" + port + "\"\n", "config", "api.app_addr"},
		{"api:\n  grpc_addr: \"" + port + "\"\n", "config", "api.grpc_addr"},
		{"lucky:\n  grpc_addr: \"" + port + "\"\n", "config", "lucky.grpc_addr"},
	} {
		_, err := runCLI(t, base+tc.yaml, tc.cmd)
		if err == nil {
			t.Errorf("roomflow %s with %s on metrics.addr: exit 0, want 2 naming %s", tc.cmd, tc.key, tc.key)
		} else if cli.ExitCode(err) != cli.ExitUsage || !strings.Contains(err.Error(), "config: "+tc.key+": must differ from metrics.addr") {
			t.Errorf("roomflow %s with %s on metrics.addr: exit %d (%v), want 2 naming %s", tc.cmd, tc.key, cli.ExitCode(err), err, tc.key)
		}
	}
}
