package command

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/processors/room/roomtest"
	"github.com/hyapp/roomflow/processors/streams/rttest"
)

// childArgsEnv carries the arguments of a roomflow child process, one per
// line.
const childArgsEnv = "ROOMFLOW_CHILD_ARGS"

// TestHelperRoomflowChild is not a test: it is the body of a child process
// running the real command tree with the arguments in ROOMFLOW_CHILD_ARGS
// until SIGTERM or SIGKILL. Without the variable it returns at once.
func TestHelperRoomflowChild(t *testing.T) {
	args := os.Getenv(childArgsEnv)
	if args == "" {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	root := NewRoot()
	root.SetArgs(strings.Split(args, "\n"))
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "roomflow:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// staticEnv is a room processor setup whose group session (2 minutes) is
// far longer than any wait of the tests below: partitions that move
// within their waits moved because of static membership, not because a
// session expired (a dynamic member's restart also waits for kgo's 60s
// rebalance timeout).
type staticEnv struct {
	k     *testenv.Kafka
	cfg   string
	feeds int
}

func newStaticEnv(t *testing.T) *staticEnv {
	k := testenv.NewKafka(t, testenv.Partitions(3))
	m := testenv.NewMySQL(t)
	var b strings.Builder
	b.WriteString("log:\n  level: warn\n  format: text\nmetrics:\n  addr: \"\"\nshutdown:\n  timeout: 3s\n")
	b.WriteString("mysql:\n  dsn: \"" + m.DSN + "\"\n")
	b.WriteString(k.ConfigYAML(3))
	b.WriteString("  session_timeout: 2m\n")
	b.WriteString("process:\n  room_group: " + testenv.UniqueName(t) + "\n  commit_interval: 50ms\n")
	return &staticEnv{k: k, cfg: testenv.WriteConfig(t, b.String())}
}

// feed produces n more mic events (the room processor re-keys each one
// exactly once) and returns how many the output must hold in all.
func (e *staticEnv) feed(t *testing.T, total *int, n int) int {
	e.feeds++
	recs := roomtest.Mic(n, 10, 50, uint64(e.feeds)).Records(e.k.Config.Topics.RoomEvents)
	rttest.Produce(t, e.k.Client(t), recs)
	*total += len(recs)
	return *total
}

// processed waits until the user mic events topic holds want records (and
// no more), failing after within with the child's output, if any.
func (e *staticEnv) processed(t *testing.T, want int, within time.Duration, what string, out *testenv.SyncBuffer) {
	t.Helper()
	got := rttest.ReadCommitted(t, e.k.Brokers, e.k.Config.Topics.UserMicEvents, want, 300*time.Millisecond, within)
	if len(got) != want {
		logs := ""
		if out != nil {
			logs = "\n" + out.String()
		}
		t.Fatalf("%s: %d mic events re-keyed within %s, want exactly %d%s", what, len(got), within, want, logs)
	}
}

// A `roomflow process --instance-id` killed with SIGKILL and restarted
// under the same id processes again at once: the coordinator gives the
// static member its old assignment back. Without static membership the
// new member's join waits for the dead one (session 2m, rebalance 60s)
// and the restart processes nothing within 40s.
func TestProcessRestartTakesPartitionsBack(t *testing.T) {
	e := newStaticEnv(t)
	child := func() (stop func(sig syscall.Signal), out *testenv.SyncBuffer) {
		cmd := testenv.ChildCommand("^TestHelperRoomflowChild$", childArgsEnv+"="+strings.Join(
			[]string{"--config", e.cfg, "process", "--only", "room", "--instance-id", "pod-a"}, "\n"))
		out = &testenv.SyncBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		stopped := false
		stop = func(sig syscall.Signal) {
			if !stopped {
				stopped = true
				_ = cmd.Process.Signal(sig)
				<-done
			}
		}
		t.Cleanup(func() { stop(syscall.SIGKILL) })
		return stop, out
	}
	var total int
	stop, out := child()
	e.processed(t, e.feed(t, &total, 300), 60*time.Second, "first process", out)
	stop(syscall.SIGKILL)
	want := e.feed(t, &total, 300)
	stop, out = child()
	e.processed(t, want, 40*time.Second, "the process restarted after SIGKILL under the same --instance-id", out)
	stop(syscall.SIGTERM)
}

// A static member stopped by SIGTERM leaves its group: another replica
// takes its partitions at once instead of after the 2m session (kgo never
// leaves a group as a static member on its own).
func TestProcessSIGTERMLeavesGroup(t *testing.T) {
	e := newStaticEnv(t)
	run := func(id string) (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			root := NewRoot()
			root.SetArgs([]string{"--config", e.cfg, "process", "--only", "room", "--instance-id", id})
			done <- root.ExecuteContext(ctx)
		}()
		stopped := false
		stop = func() {
			if stopped {
				return
			}
			stopped = true
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("%s after SIGTERM: %v", id, err)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("%s did not stop on SIGTERM", id)
			}
		}
		t.Cleanup(stop)
		return stop
	}
	var total int
	stopA := run("pod-a")
	e.processed(t, e.feed(t, &total, 300), 60*time.Second, "pod-a", nil)
	stopB := run("pod-b")
	defer stopB()
	stopA()
	e.processed(t, e.feed(t, &total, 300), 40*time.Second, "pod-b after pod-a's SIGTERM", nil)
}
