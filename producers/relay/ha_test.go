package relay_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// leaderOf returns the child whose latest LEADER/STANDBY line is LEADER.
func leaderOf(cs ...*child) *child {
	for _, c := range cs {
		state := ""
		for _, l := range c.snapshot() {
			if l == "LEADER" || l == "STANDBY" {
				state = l
			}
		}
		select {
		case <-c.exited:
			continue
		default:
		}
		if state == "LEADER" {
			return c
		}
	}
	return nil
}

// waitLeader waits until exactly one live child other than not leads.
func waitLeader(t *testing.T, d time.Duration, not *child, cs ...*child) (*child, time.Duration) {
	t.Helper()
	start := time.Now()
	for time.Since(start) < d {
		if l := leaderOf(cs...); l != nil && l != not {
			return l, time.Since(start)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no new leader within %s", d)
	return nil, 0
}

// TestTwoReplicas: with a leader and a standby relaying a stream of
// inserts, SIGKILL the leader: the standby takes over within
// relay.failover_timeout. Then freeze the new leader (SIGSTOP) inside an
// open transaction: a third replica takes over and fences it, and the
// frozen one, resumed, cannot commit. Kafka ends with every row exactly
// once.
func TestTwoReplicas(t *testing.T) { forModes(t, testTwoReplicas) }

func testTwoReplicas(t *testing.T, mode relayMode) {
	k := newKafka(t)
	m := mode.mysql(t)
	cfg := mode.config(testConfig(t, k), m)
	cfg.BatchSize = 200
	if k.Fake != nil {
		// session 3.3s: room for a loaded machine within the 5s bound
		cfg.FailoverTimeout = 5 * time.Second
	}
	failover := cfg.FailoverTimeout
	ctx := context.Background()
	dir := t.TempDir()
	freeze := func(name string) string { return filepath.Join(dir, name+".freeze") }

	a := startChild(t, "a", cfg, m.DSN, envFreezeFile+"="+freeze("a"))
	if idx, _ := a.waitLine(0, "LEADER", 20*time.Second); idx < 0 {
		t.Fatalf("first replica never led: %q", a.snapshot())
	}
	b := startChild(t, "b", cfg, m.DSN, envFreezeFile+"="+freeze("b"))
	time.Sleep(failover / 2) // b joins the group as standby (or takes partition 0 in a handover)

	// Rows keep arriving (about 4,000/s) until the scenario is over.
	stopWriting := make(chan struct{})
	writeErr := make(chan error, 1)
	go func() { writeErr <- streamWriters(ctx, m.DB, "ha-", 4, 50, 48, 50*time.Millisecond, stopWriting) }()
	time.Sleep(time.Second)

	// 1. Kill the leader; the standby takes over within failover_timeout.
	l1, _ := waitLeader(t, failover, nil, a, b)
	before := l1.count("COMMITTED")
	if before == 0 {
		if idx, _ := l1.waitLine(0, "COMMITTED", 10*time.Second); idx < 0 {
			t.Fatalf("leader %s committed nothing", l1.name)
		}
	}
	l1.kill(t)
	l2, took := waitLeader(t, failover+5*time.Second, l1, a, b)
	t.Logf("leader %s killed; %s took over after %s (failover_timeout %s)", l1.name, l2.name, took.Round(time.Millisecond), failover)
	if took > failover {
		t.Errorf("takeover took %s, more than relay.failover_timeout %s", took, failover)
	}

	// 2. A third replica stands by; freeze the leader inside a transaction.
	c := startChild(t, "c", cfg, m.DSN)
	time.Sleep(failover / 2)
	if leaderOf(a, b, c) != l2 {
		// the joining standby may have been handed partition 0; freeze whoever leads
		l2, _ = waitLeader(t, failover, nil, a, b, c)
	}
	from := len(l2.snapshot())
	if err := os.WriteFile(freeze(l2.name), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	idx, line := l2.waitLine(from, "PAUSED", 20*time.Second)
	if idx < 0 {
		t.Fatalf("leader %s never paused before a commit: %q", l2.name, l2.snapshot())
	}
	if err := l2.cmd.Process.Signal(sigStop); err != nil {
		t.Fatal(err)
	}
	frozenBatch := strings.TrimPrefix(line, "PAUSED ")
	frozenAt := time.Now()
	var others []*child
	for _, x := range []*child{a, b, c} {
		if x != l2 {
			others = append(others, x)
		}
	}
	l3, took := waitLeader(t, failover+5*time.Second, l2, others...)
	t.Logf("leader %s frozen in the transaction ending at id %s; %s took over after %s", l2.name, frozenBatch, l3.name, took.Round(time.Millisecond))
	if took > failover {
		t.Errorf("takeover from a frozen leader took %s, more than %s", took, failover)
	}
	// Let the new leader commit something, then resume the old one.
	n3 := l3.count("COMMITTED")
	if _, l := l3.waitLine(0, "COMMITTED", 10*time.Second); l == "" && n3 == 0 {
		t.Fatalf("new leader %s committed nothing", l3.name)
	}
	if err := os.WriteFile(freeze(l2.name)+".continue", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := l2.cmd.Process.Signal(sigCont); err != nil {
		t.Fatal(err)
	}
	// Resumed, it either tries to commit and is fenced, or learns from
	// its group heartbeat first that it lost leadership and aborts: both
	// are fine, a successful commit is not.
	_, res := l2.waitLine(idx, "COMMIT|STANDBY", 20*time.Second)
	if !strings.HasPrefix(res, "COMMIT_FAILED "+frozenBatch+" ") && res != "STANDBY" {
		t.Fatalf("resumed former leader %s: %q after freezing at %s, want COMMIT_FAILED (fenced) or STANDBY", l2.name, res, frozenBatch)
	}
	t.Logf("resumed former leader: %s (frozen %s ago)", res, time.Since(frozenAt).Round(time.Millisecond))

	time.Sleep(time.Second) // the new leader relays on while rows still arrive
	close(stopWriting)
	if err := <-writeErr; err != nil {
		t.Fatal(err)
	}
	total := countRows(t, m.DB)
	waitCount(t, k, cfg.Topic, total, 120*time.Second)
	for _, x := range []*child{a, b, c} {
		select {
		case <-x.exited:
		default:
			x.terminate(t)
			if x.count("EXITED") != 1 {
				t.Errorf("child %s did not exit cleanly on SIGTERM: %q", x.name, x.snapshot())
			}
		}
	}
	t.Logf("failed commits after the freeze: new leader %d, resumed %d", l3.count("COMMIT_FAILED"), l2.count("COMMIT_FAILED"))
	checkExactlyOnce(t, loadOracle(t, m.DB), drain(t, k, cfg.Topic))
}
