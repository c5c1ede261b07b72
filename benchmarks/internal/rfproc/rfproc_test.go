package rfproc

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestProcCPU: the CPU time of this process grows while it spins, and a
// process that does not exist is an error.
func TestProcCPU(t *testing.T) {
	before, err := ProcCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
	}
	after, err := ProcCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// 300 ms of spinning, ticks of 10 ms, a shared machine: at least 100 ms.
	if d := after - before; d < 100*time.Millisecond || d > time.Minute {
		t.Fatalf("CPU grew by %s while spinning 300ms", d)
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
