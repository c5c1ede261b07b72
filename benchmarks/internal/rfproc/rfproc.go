// Package rfproc runs `roomflow` components as child processes for the
// benchmarks that measure whole processes (benchmarks/failover,
// benchmarks/e2e): it builds the binary once, writes each child's config
// as YAML, starts it with its own log file, signals it, and reads its CPU
// time, so every benchmark handles children the same way. Benchmarks only;
// Linux (CPU time comes from /proc).
package rfproc

import (
	"context"
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

	"github.com/hyapp/roomflow/internal/config"
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
