package relay_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hyapp/roomflow/producers/relay"
)

// TestCrashExactlyOnce stops the relay without committing at 20 random
// points while 100k rows are written: half in-process (context cancelled
// inside an open transaction, or at a random instant), half child processes
// killed with SIGKILL (by themselves inside an open transaction, or by the
// test at a random instant). Each stop is followed by a restart from the
// position in Kafka. A read_committed consumer then sees every row exactly
// once.
func TestCrashExactlyOnce(t *testing.T) { forModes(t, testCrashExactlyOnce) }

func testCrashExactlyOnce(t *testing.T, mode relayMode) {
	k := newKafka(t)
	m := mode.mysql(t)
	cfg := mode.config(testConfig(t, k), m)
	cfg.BatchSize = 500
	const total = 100_000
	rnd := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	seed := rnd.Uint64()
	t.Logf("seed %d", seed)
	rnd = rand.New(rand.NewPCG(seed, 3))

	ctx := context.Background()
	writeErr := make(chan error, 1)
	go func() { writeErr <- writers(ctx, m.DB, "cr-", total, 4, 500, 48, 120*time.Millisecond) }()

	const instance = "crash-test"
	var commits atomic.Int64
	for i := range 20 {
		mode := i % 4
		switch mode {
		case 0, 1: // in-process: cancel inside a transaction, or at a random instant
			rctx, cancel := context.WithCancel(ctx)
			after := int64(rnd.IntN(8))
			var mine atomic.Int64
			leader := make(chan struct{}, 1)
			hooks := relay.Hooks{
				OnLeader: func(l bool) {
					if l {
						leader <- struct{}{}
					}
				},
				BeforeCommit: func(_ context.Context, _ relay.BatchInfo) {
					if mode == 0 && mine.Load() >= after {
						cancel() // the relay must abort this open transaction
					}
				},
				AfterCommit: func(_ relay.BatchInfo, err error) {
					if err == nil {
						mine.Add(1)
						commits.Add(1)
					}
				},
			}
			rc := withHooks(cfg, hooks)
			rc.InstanceID, rc.Logger = instance, infoLogger(t)
			rc.Kafka.Logger = rc.Logger
			r, err := relay.New(rc, m.DB)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- r.Run(rctx) }()
			select {
			case <-leader:
			case <-time.After(20 * time.Second):
				buf := make([]byte, 1<<20)
				t.Logf("goroutines:\n%s", buf[:runtime.Stack(buf, true)])
				logTransactions(t, k, cfg.OffsetsTopic)
				t.Fatalf("crash %d: in-process relay never led", i)
			}
			if mode == 1 {
				time.Sleep(time.Duration(rnd.IntN(400)) * time.Millisecond)
				cancel()
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("crash %d: relay returned %v", i, err)
				}
			case <-time.After(40 * time.Second):
				t.Fatalf("crash %d: relay did not stop", i)
			}
			cancel()
			t.Logf("crash %d: in-process mode %d after %d commits", i, mode, mine.Load())
		case 2, 3: // child process killed with SIGKILL
			env := []string{envInstance + "=" + instance}
			if mode == 2 {
				env = append(env, fmt.Sprintf("%s=%d", envKillAfter, rnd.IntN(8)))
			}
			c := startChild(t, fmt.Sprintf("crash-%d", i), cfg, m.DSN, env...)
			if idx, _ := c.waitLine(0, "LEADER", 20*time.Second); idx < 0 {
				c.stuck(t)
				logTransactions(t, k, cfg.OffsetsTopic)
				t.Fatalf("crash %d: child never led: %q", i, c.snapshot())
			}
			if mode == 3 {
				time.Sleep(time.Duration(rnd.IntN(400)) * time.Millisecond)
				c.kill(t)
			} else {
				if idx, _ := c.waitLine(0, "KILLING", 20*time.Second); idx < 0 {
					t.Fatalf("crash %d: child did not kill itself: %q", i, c.snapshot())
				}
				<-c.exited
			}
			n := c.count("COMMITTED")
			commits.Add(int64(n))
			t.Logf("crash %d: child mode %d killed after %d commits", i, mode, n)
		}
	}
	if err := <-writeErr; err != nil {
		t.Fatal(err)
	}
	if commits.Load() == 0 {
		t.Fatal("no incarnation committed anything: the crashes did not happen during the run")
	}
	final := cfg
	final.InstanceID = instance
	x := startRelay(t, final, m.DB, nil)
	if n, ok := countWithin(t, k, cfg.Topic, total, 120*time.Second); !ok {
		// Stop and compare anyway: the check names the rows that never came.
		t.Errorf("waited 2m for %d records on %s, saw %d", total, cfg.Topic, n)
	}
	x.stop(t)
	checkExactlyOnce(t, loadOracle(t, m.DB), drain(t, k, cfg.Topic))
	if a := metric(t, x.reg, "roomflow_relay_batches_total", "result", "committed"); a == 0 && commits.Load()*500 < total {
		t.Errorf("final relay committed nothing yet rows remained")
	}
}
