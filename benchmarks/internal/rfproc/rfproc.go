// Package rfproc runs `roomflow` components as child processes for the
// benchmarks that measure whole processes (benchmarks/failover,
// benchmarks/e2e): it builds the binary once, writes each child's config
// as YAML, starts it with its own log file, signals it, and reads its CPU
// time, so every benchmark handles children the same way. Benchmarks only;
// Linux (CPU time comes from /proc).
package rfproc

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/hyapp/roomflow/benchmarks/internal/benchkafka"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/mysqlx"
	"github.com/hyapp/roomflow/sinks/tencentim/imfake"
)

// Build compiles ./cmd/roomflow (run from the module root, as `go run
// ./benchmarks/...` is) into dir and returns the binary's path. Its errors
// are go build's, with the compiler output on stderr.
func Build(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "roomflow")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/roomflow")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/roomflow: %w", err)
	}
	return bin, nil
}

// Runner starts children of one binary, their configs and logs in one
// directory. Safe for concurrent use.
type Runner struct {
	// Bin is the roomflow binary (Build).
	Bin string
	// Dir holds each child's YAML config and log.
	Dir string
	// Env is added to every child's environment (the secrets a YAML does
	// not carry: `roomflow config` output is redacted).
	Env []string

	mu sync.Mutex
	n  int // children started, numbering their logs
}

// Spec is one child.
type Spec struct {
	// Command is the roomflow subcommand: relay, process, sink,
	// publish-im, run ...
	Command string
	// ID names the child: its config file, its log, and with InstanceID
	// its --instance-id (static group membership, as deploy/kubernetes
	// runs the components).
	ID         string
	InstanceID bool
	// Config is written as the child's --config.
	Config *config.Config
	// Args are added after the generated ones.
	Args []string
}

// Child is a started roomflow process.
type Child struct {
	ID      string
	Command string
	Log     string // path of its stdout and stderr
	cmd     *exec.Cmd
	done    chan struct{}
	err     error // Wait's, once done is closed
}

// Start starts s. The child runs until it exits by itself or is signalled;
// Done tells when.
func (r *Runner) Start(s Spec) (*Child, error) {
	if s.Command == "" || s.ID == "" || s.Config == nil {
		return nil, errors.New("rfproc: a Spec needs Command, ID and Config")
	}
	r.mu.Lock()
	r.n++
	n := r.n
	r.mu.Unlock()
	y, err := s.Config.YAML()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(r.Dir, s.ID+".yaml")
	if err := os.WriteFile(path, y, 0o600); err != nil {
		return nil, err
	}
	args := []string{s.Command, "--config", path}
	if s.InstanceID {
		args = append(args, "--instance-id", s.ID)
	}
	args = append(args, s.Args...)
	logPath := filepath.Join(r.Dir, fmt.Sprintf("%03d-%s-%s.log", n, s.Command, s.ID))
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(r.Bin, args...)
	cmd.Env = append(os.Environ(), r.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("rfproc: start %s %s: %w", s.Command, s.ID, err)
	}
	c := &Child{ID: s.ID, Command: s.Command, Log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() { c.err = cmd.Wait(); logf.Close(); close(c.done) }()
	return c, nil
}

// Pid is the child's process id.
func (c *Child) Pid() int { return c.cmd.Process.Pid }

// Done is closed once the child has exited.
func (c *Child) Done() <-chan struct{} { return c.done }

// Signal sends sig and waits until the child has exited.
func (c *Child) Signal(sig syscall.Signal) {
	_ = c.cmd.Process.Signal(sig)
	<-c.done
}

// Stop sends SIGTERM and waits up to timeout for the exit, then SIGKILL.
// It returns the exit error of a child that did not exit cleanly.
func (c *Child) Stop(timeout time.Duration) error {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(timeout):
		_ = c.cmd.Process.Kill()
		<-c.done
		return fmt.Errorf("rfproc: %s %s did not stop within %s", c.Command, c.ID, timeout)
	}
	return c.err
}

// ErrExited is returned by CPU for a child that has exited.
var ErrExited = errors.New("rfproc: child exited")

// CPU is the child's user+system CPU time so far (its threads, not its
// children), from /proc/<pid>/stat.
func (c *Child) CPU() (time.Duration, error) {
	select {
	case <-c.done:
		if ps := c.cmd.ProcessState; ps != nil {
			return ps.UserTime() + ps.SystemTime(), nil
		}
		return 0, ErrExited
	default:
	}
	return ProcCPU(c.Pid())
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// ProcCPU is the user+system CPU time of process pid (Linux).
func ProcCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// fields are counted after its closing parenthesis.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("rfproc: /proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state): utime is field 14, stime field 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("rfproc: /proc/%d/stat: %d fields", pid, len(f)+2)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("rfproc: /proc/%d/stat: %w", pid, err)
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// imSecret signs the fake IM's usersigs: a benchmark's own fake, never a
// real key.
const imSecret = "rfproc-bench-secret-not-for-production"

// EnvOptions shape the environment of a child-process benchmark.
type EnvOptions struct {
	// Name prefixes the temporary directory and the scratch database.
	Name string
	// Bin is the roomflow binary; empty builds ./cmd/roomflow into the
	// temporary directory.
	Bin string
	// MySQLServer is the server DSN; a throwaway migrated database is
	// created on it and dropped by Close.
	MySQLServer string
	// KeepLogs keeps the children's configs and logs (the directory is
	// printed) instead of removing them.
	KeepLogs bool
	// KafkaChild runs kfake in a child process of this binary (its main
	// must call benchkafka.RunChild first), so the brokers' CPU is not the
	// benchmark's.
	KafkaChild bool
	// Configure changes the children's config (on top of Env.Config's
	// settings) before it is validated and the topics are created.
	Configure func(*config.Config)
}

// Env is what a child-process benchmark runs on: kfake (3 brokers), a
// scratch MariaDB database, a fake Tencent IM, the built binary and the
// config every child starts from.
type Env struct {
	Runner *Runner
	// Config is the children's config: the env's brokers, database and
	// fake IM, logs at warn as text, no listeners (children share the
	// host), Mic.CompensationInterval 24h (generated traffic lies in the
	// past), plus Configure's changes.
	Config config.Config
	DB     *sql.DB
	Admin  *kadm.Client
	// DBName is the scratch database's name (unique per run: usable as
	// an event-id prefix).
	DBName  string
	closers []func()
}

// NewEnv sets an Env up; Close tears it down (also after an error here).
func NewEnv(ctx context.Context, o EnvOptions) (e *Env, err error) {
	e = &Env{}
	defer func() {
		if err != nil {
			e.Close()
		}
	}()
	dir, err := os.MkdirTemp("", "roomflow-"+o.Name+"-")
	if err != nil {
		return e, err
	}
	if o.KeepLogs {
		fmt.Println("children's configs and logs in", dir)
	} else {
		e.closers = append(e.closers, func() { os.RemoveAll(dir) })
	}
	if o.Bin == "" {
		if o.Bin, err = Build(ctx, dir); err != nil {
			return e, err
		}
	}
	brokers, stopKafka, err := benchkafka.Start("", benchkafka.Options{Child: o.KafkaChild})
	if err != nil {
		return e, err
	}
	e.closers = append(e.closers, stopKafka)
	im := imfake.New(imfake.Config{SDKAppID: 1400000002, AdminIdentifier: "administrator", SecretKey: imSecret})
	imURL, stopIM, err := im.Listen("127.0.0.1:0")
	if err != nil {
		return e, err
	}
	e.closers = append(e.closers, func() { _ = stopIM() })
	e.DBName = fmt.Sprintf("roomflow_%s_%d", o.Name, time.Now().UnixNano())
	scratch, err := mysqlx.NewScratch(ctx, o.MySQLServer, e.DBName, true)
	if err != nil {
		return e, fmt.Errorf("mysql server: %w", err)
	}
	e.closers = append(e.closers, func() { _ = scratch.Drop(context.Background()) })
	// The YAML a child reads is redacted: the IM key goes by environment.
	e.Runner = &Runner{Bin: o.Bin, Dir: dir, Env: []string{"ROOMFLOW_IM_SECRET_KEY=" + imSecret}}

	cfg := config.Default()
	cfg.Log.Level, cfg.Log.Format = "warn", "text"
	cfg.Metrics.Addr, cfg.API.Addr, cfg.API.AppAddr, cfg.API.GRPCAddr = "", "", "", ""
	cfg.Kafka.Brokers = brokers
	cfg.MySQL.DSN = scratch.DSN
	cfg.IM.Endpoint, cfg.IM.SDKAppID = imURL, 1400000002
	cfg.Mic.CompensationInterval = config.Duration(24 * time.Hour)
	if o.Configure != nil {
		o.Configure(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		return e, err
	}
	e.Config = cfg
	if e.DB, err = mysqlx.Open(ctx, cfg.MySQL); err != nil {
		return e, err
	}
	e.closers = append(e.closers, func() { e.DB.Close() })
	acl, err := cfg.Kafka.Cluster(nil, nil).NewClient(o.Name + "-bench")
	if err != nil {
		return e, err
	}
	e.closers = append(e.closers, acl.Close)
	e.Admin = kadm.NewClient(acl)
	if _, err := kafkax.EnsureTopics(ctx, e.Admin, cfg.Kafka.Layout()); err != nil {
		return e, err
	}
	return e, nil
}

// Close tears the env down, last set up first.
func (e *Env) Close() {
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
	e.closers = nil
}

// Processes lists the processes whose command name (/proc/<pid>/comm,
// at most 15 bytes) is comm and, when parent > 0, whose parent is
// parent: the kfake child of a benchmark (its own binary), or the
// MariaDB server (mariadbd), whose CPU a run reports next to the
// components'.
func Processes(comm string, parent int) []int {
	if len(comm) > 15 {
		comm = comm[:15]
	}
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/comm")
		if err != nil || strings.TrimSpace(string(b)) != comm {
			continue
		}
		if parent > 0 && parentOf(pid) != parent {
			continue
		}
		out = append(out, pid)
	}
	return out
}

func parentOf(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}
