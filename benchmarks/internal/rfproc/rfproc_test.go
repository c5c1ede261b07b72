package rfproc

import (
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestProcCPU: ProcCPU of this process agrees with getrusage(2) over a
// spin of 200 ms of CPU (CPU, not wall time: on a loaded machine 300 ms of
// wall time gave less than 100 ms of CPU), within /proc's 10 ms ticks; a
// process that does not exist is an error.
func TestProcCPU(t *testing.T) {
	rusage := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	r0 := rusage()
	before, err := ProcCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); rusage()-r0 < 200*time.Millisecond && time.Now().Before(deadline); {
	}
	after, err := ProcCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	spun := rusage() - r0
	if d := after - before; d < spun-50*time.Millisecond || d > spun+50*time.Millisecond {
		t.Fatalf("ProcCPU grew by %s while getrusage counted %s", d, spun)
	}
	if _, err := ProcCPU(1 << 30); err == nil {
		t.Fatal("CPU time of a process that does not exist")
	}
}

// TestStartNeedsASpec: a Spec without a command, id or config is refused
// before anything is written or started.
func TestStartNeedsASpec(t *testing.T) {
	r := &Runner{Bin: "/bin/false", Dir: t.TempDir()}
	if _, err := r.Start(Spec{ID: "x"}); err == nil {
		t.Fatal("started a child without a command and config")
	}
}

// TestProcesses finds this test binary by its command name and parent.
func TestProcesses(t *testing.T) {
	comm, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Fatal(err)
	}
	got := Processes(strings.TrimSpace(string(comm)), os.Getppid())
	if !slices.Contains(got, os.Getpid()) {
		t.Fatalf("Processes(%q, %d) = %v, want this process %d in it", comm, os.Getppid(), got, os.Getpid())
	}
	if got := Processes(strings.TrimSpace(string(comm)), 1<<30); len(got) != 0 {
		t.Fatalf("processes of a parent that does not exist: %v", got)
	}
}
