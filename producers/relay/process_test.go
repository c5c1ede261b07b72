package relay_test

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/mysqlx"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/producers/relay"
)

// Child relay processes: the test binary re-executes itself running only
// TestHelperRelayProcess, which runs a real relay against the parent's
// brokers and database, reports what it does on stdout, and can be killed
// with SIGKILL or frozen with SIGSTOP like any process.
//
// The kgo debug log and a copy of each child's stderr are available for
// debugging with ROOMFLOW_RELAY_HELPER_KGO_DEBUG=1 and
// ROOMFLOW_RELAY_HELPER_STDERR_DIR=<dir>.
const (
	envHelper     = "ROOMFLOW_RELAY_HELPER"             // "1" in a child
	envConfig     = "ROOMFLOW_RELAY_HELPER_CONFIG"      // childConfig as JSON
	envInstance   = "ROOMFLOW_RELAY_HELPER_INSTANCE"    // static member id, optional
	envKillAfter  = "ROOMFLOW_RELAY_HELPER_KILL_AFTER"  // SIGKILL self before the commit after N commits
	envFreezeFile = "ROOMFLOW_RELAY_HELPER_FREEZE_FILE" // when this file exists: park before a commit until <file>.continue exists
	helperPrefix  = "RELAYHELPER "
)

// childConfig is what a child relay runs with: the settings of the
// parent's relay.Config (its hooks, logger, registry and clients do not
// cross a process) and the database.
type childConfig struct {
	DSN             string
	Brokers         []string
	ClientID        string
	TransactionalID string
	Topic           string
	DLQTopic        string
	OffsetsTopic    string
	BatchSize       int
	PollInterval    time.Duration
	GapMaxAge       time.Duration
	MaxOpenGaps     int
	FailoverTimeout time.Duration
	ShutdownTimeout time.Duration
	MaxRecordBytes  int
	MaxBatchBytes   int
	Routes          map[string]string
	Mode            relay.Mode
	BinlogServerID  uint32
	HeartbeatPeriod time.Duration
}

func newChildConfig(cfg relay.Config, dsn string) childConfig {
	return childConfig{DSN: dsn, Brokers: cfg.Kafka.Brokers, ClientID: cfg.Kafka.ClientID,
		TransactionalID: cfg.TransactionalID, Topic: cfg.Topic, DLQTopic: cfg.DLQTopic, OffsetsTopic: cfg.OffsetsTopic,
		BatchSize: cfg.BatchSize, PollInterval: cfg.PollInterval, GapMaxAge: cfg.GapMaxAge, MaxOpenGaps: cfg.MaxOpenGaps,
		FailoverTimeout: cfg.FailoverTimeout, ShutdownTimeout: cfg.ShutdownTimeout,
		MaxRecordBytes: cfg.MaxRecordBytes, MaxBatchBytes: cfg.MaxBatchBytes, Routes: cfg.Routes,
		Mode: cfg.Mode, BinlogServerID: cfg.Binlog.ServerID, HeartbeatPeriod: cfg.Binlog.HeartbeatPeriod}
}

func (c childConfig) relay() relay.Config {
	return relay.Config{Kafka: kafkax.Cluster{Brokers: c.Brokers, ClientID: c.ClientID},
		TransactionalID: c.TransactionalID, Topic: c.Topic, DLQTopic: c.DLQTopic, OffsetsTopic: c.OffsetsTopic,
		BatchSize: c.BatchSize, PollInterval: c.PollInterval, GapMaxAge: c.GapMaxAge, MaxOpenGaps: c.MaxOpenGaps,
		FailoverTimeout: c.FailoverTimeout, ShutdownTimeout: c.ShutdownTimeout,
		MaxRecordBytes: c.MaxRecordBytes, MaxBatchBytes: c.MaxBatchBytes, Routes: c.Routes,
		Mode: c.Mode, Binlog: relay.BinlogConfig{DSN: c.DSN, ServerID: c.BinlogServerID, HeartbeatPeriod: c.HeartbeatPeriod}}
}

// TestHelperRelayProcess is not a test: it is the body of a child relay
// process and returns at once unless ROOMFLOW_RELAY_HELPER=1.
func TestHelperRelayProcess(t *testing.T) {
	if os.Getenv(envHelper) != "1" {
		return
	}
	say := func(format string, args ...any) { fmt.Printf(helperPrefix+format+"\n", args...) }
	var child childConfig
	if err := json.Unmarshal([]byte(os.Getenv(envConfig)), &child); err != nil {
		say("ERROR config: %v", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	db, err := openTuned(ctx, child.DSN)
	if err != nil {
		say("ERROR mysql: %v", err)
		os.Exit(2)
	}
	defer db.Close()
	killAfter := -1
	if v := os.Getenv(envKillAfter); v != "" {
		killAfter, _ = strconv.Atoi(v)
	}
	freezeFile := os.Getenv(envFreezeFile)
	var commits atomic.Int64
	hooks := relay.Hooks{
		OnLeader: func(leading bool) {
			if leading {
				say("LEADER")
			} else {
				say("STANDBY")
			}
		},
		BeforeCommit: func(_ context.Context, b relay.BatchInfo) {
			if killAfter >= 0 && commits.Load() >= int64(killAfter) {
				say("KILLING in transaction at id %d", b.LastID)
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				time.Sleep(time.Hour)
			}
			if freezeFile != "" {
				if _, err := os.Stat(freezeFile); err == nil {
					// Park inside the open transaction; the parent stops the
					// process with SIGSTOP, and writes the .continue file
					// before its SIGCONT, so nothing here runs in between.
					_ = os.Remove(freezeFile)
					say("PAUSED %d", b.LastID)
					for {
						if _, err := os.Stat(freezeFile + ".continue"); err == nil {
							break
						}
						time.Sleep(5 * time.Millisecond)
					}
					say("RESUMED %d", b.LastID)
				}
			}
		},
		AfterCommit: func(b relay.BatchInfo, err error) {
			if err != nil {
				say("COMMIT_FAILED %d %v", b.LastID, err)
				return
			}
			commits.Add(1)
			say("COMMITTED %d", b.LastID)
		},
	}
	cfg := child.relay()
	cfg.Hooks = hooks
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg.Kafka.Logger = cfg.Logger
	if os.Getenv("ROOMFLOW_RELAY_HELPER_KGO_DEBUG") == "1" {
		cfg.Kafka.Extra = []kgo.Opt{kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelDebug, nil))}
	}
	cfg.InstanceID = os.Getenv(envInstance)
	r, err := relay.New(cfg, db)
	if err != nil {
		say("ERROR new: %v", err)
		os.Exit(2)
	}
	if err := r.Run(ctx); err != nil {
		say("ERROR run: %v", err)
		os.Exit(1)
	}
	say("EXITED")
}

// openTuned opens dsn with the driver settings roomflow's own pool uses
// (mysqlx.Tune) and checks that the server answers.
func openTuned(ctx context.Context, dsn string) (*sql.DB, error) {
	dc, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	mysqlx.Tune(dc)
	connector, err := mysql.NewConnector(dc)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(connector)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// child is a relay process started by a test.
type child struct {
	name string
	cmd  *exec.Cmd

	mu     sync.Mutex
	lines  []string
	notify chan struct{} // closed and replaced on every new line
	exited chan struct{}
	stderr *testenv.SyncBuffer
}

// startChild starts a child relay on cfg's settings reading the database
// at dsn.
func startChild(t testing.TB, name string, cfg relay.Config, dsn string, env ...string) *child {
	t.Helper()
	raw, err := json.Marshal(newChildConfig(cfg, dsn))
	if err != nil {
		t.Fatal(err)
	}
	cmd := testenv.ChildCommand("^TestHelperRelayProcess$", append([]string{envHelper + "=1", envConfig + "=" + string(raw)}, env...)...)
	c := &child{name: name, cmd: cmd, notify: make(chan struct{}), exited: make(chan struct{}), stderr: &testenv.SyncBuffer{}}
	cmd.Stderr = c.stderr
	if dir := os.Getenv("ROOMFLOW_RELAY_HELPER_STDERR_DIR"); dir != "" {
		if f, err := os.Create(filepath.Join(dir, name+".stderr")); err == nil {
			cmd.Stderr = io.MultiWriter(c.stderr, f)
			t.Cleanup(func() { f.Close() })
		}
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, helperPrefix) {
				continue
			}
			c.mu.Lock()
			c.lines = append(c.lines, strings.TrimPrefix(line, helperPrefix))
			close(c.notify)
			c.notify = make(chan struct{})
			c.mu.Unlock()
		}
		_ = cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-c.exited
		if t.Failed() {
			t.Logf("child %s stdout: %q", c.name, c.snapshot())
			t.Logf("child %s stderr (tail): %s", c.name, tail(c.stderr.String(), 3000))
		}
	})
	return c
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func (c *child) snapshot() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.lines...)
}

// waitLine waits until a line at index from or later starts with prefix
// (alternatives separated by "|") and returns its index and text, or -1 on
// timeout or exit.
func (c *child) waitLine(from int, prefix string, d time.Duration) (int, string) {
	alts := strings.Split(prefix, "|")
	match := func(l string) bool {
		for _, a := range alts {
			if strings.HasPrefix(l, a) {
				return true
			}
		}
		return false
	}
	deadline := time.After(d)
	for {
		c.mu.Lock()
		for i := from; i < len(c.lines); i++ {
			if match(c.lines[i]) {
				l := c.lines[i]
				c.mu.Unlock()
				return i, l
			}
		}
		ch := c.notify
		c.mu.Unlock()
		select {
		case <-ch:
		case <-c.exited:
			c.mu.Lock()
			defer c.mu.Unlock()
			for i := from; i < len(c.lines); i++ {
				if match(c.lines[i]) {
					return i, c.lines[i]
				}
			}
			return -1, ""
		case <-deadline:
			return -1, ""
		}
	}
}

// signal sends sig and reports whether the child exited within d.
func (c *child) signal(sig syscall.Signal, d time.Duration) bool {
	_ = c.cmd.Process.Signal(sig)
	select {
	case <-c.exited:
		return true
	case <-time.After(d):
		return false
	}
}

func (c *child) kill(t testing.TB) {
	t.Helper()
	if !c.signal(syscall.SIGKILL, 10*time.Second) {
		t.Fatalf("child %s did not die", c.name)
	}
}

func (c *child) terminate(t testing.TB) {
	t.Helper()
	if !c.signal(syscall.SIGTERM, 30*time.Second) {
		t.Fatalf("child %s did not stop on SIGTERM", c.name)
	}
}

// stuck logs where a child that stopped making progress is: on SIGQUIT
// the Go runtime prints every goroutine and exits.
func (c *child) stuck(t testing.TB) {
	t.Helper()
	c.signal(syscall.SIGQUIT, 10*time.Second)
	t.Logf("child %s goroutines at SIGQUIT:\n%s", c.name, c.stderr.String())
}

func (c *child) count(prefix string) int {
	n := 0
	for _, l := range c.snapshot() {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

var sigCont, sigStop = syscall.SIGCONT, syscall.SIGSTOP
