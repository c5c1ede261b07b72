package mysqlsink_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/schemas/userv1"
	mysqlsink "github.com/hyapp/roomflow/sinks/mysql"
	"github.com/hyapp/roomflow/sinks/mysql/sinktest"
)

var errKilled = errors.New("killed by test")

// TestKilledTwentyTimes runs a 100k-entry ledger (plus lucky pool inflows
// and producer-style duplicates) through the sink while it is killed at 20
// random points: before a transaction, inside it after the facts are
// written, right after the transaction's commit, and between the MySQL
// commit and the Kafka commit. Each kill is followed by a fresh instance.
// Then sink processes (this test binary re-executed) are killed with
// SIGKILL at 8 random times, and a last one finishes the run. After every
// kill the stored offsets and the consumed event ids must agree (the
// event_id dedupe would hide offsets written outside the transaction);
// at the end the tables must equal the oracle.
func TestKilledTwentyTimes(t *testing.T) {
	e := newEnv(t, 6)
	e.cfg.BatchSize = 500
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 11))

	gen := sinktest.NewLedgerGen(3, "hyapp", 2000)
	gen.SkipPct = 0.02
	ledger := gen.Next(100_000)
	inflows := sinktest.NewInflowGen(4, "hyapp", 50, 10).Next(10_000)
	o := sinktest.NewOracle()
	o.AddLedger(ledger...)
	o.AddInflows(inflows...)
	// Producer retries and upstream replays: 2% of the entries twice.
	var dups []*kgo.Record
	for _, en := range ledger {
		if rng.IntN(50) == 0 {
			dups = append(dups, sinktest.LedgerRecords(e.ledgerTopic(), []*userv1.MicLedgerEntry{en})...)
		}
	}

	// Produce while the sink runs, in chunks.
	pcl := e.k.Client(t)
	all := append(sinktest.LedgerRecords(e.ledgerTopic(), ledger), sinktest.InflowRecords(e.inflowTopic(), inflows)...)
	all = append(all, dups...)
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	// The shuffle also puts each user's entries out of order: snapshots
	// carry versions and deltas commute, so the result must not depend on
	// order, which the oracle comparison proves as well.
	produced := make(chan error, 1)
	go func() {
		for lo := 0; lo < len(all); lo += 10_000 {
			if err := sinktest.Produce(ctx, pcl, all[lo:min(len(all), lo+10_000)]); err != nil {
				produced <- err
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		produced <- nil
	}()

	stages := []string{"before_apply", "in_txn", "after_facts_commit", "after_mysql_commit"}
	kills := map[string]int{}
	for kill := range 20 {
		stage := stages[rng.IntN(len(stages))]
		// Batches applied by this instance before the kill; small enough
		// that 20 kills never exhaust the 122k records (at most ~80k).
		after := int64(rng.IntN(4))
		var applied atomic.Int64
		hooks := mysqlsink.Hooks{}
		switch stage {
		case "before_apply":
			hooks.BeforeApply = func(context.Context, int) error {
				if applied.Load() >= after {
					return errKilled
				}
				return nil
			}
			hooks.AfterApply = func(context.Context, mysqlsink.Result) error { applied.Add(1); return nil }
		case "in_txn":
			hooks.InTxn = func(context.Context) error {
				if applied.Load() >= after {
					return errKilled
				}
				return nil
			}
			hooks.AfterApply = func(context.Context, mysqlsink.Result) error { applied.Add(1); return nil }
		case "after_facts_commit":
			hooks.AfterCommit = func(context.Context) error {
				if applied.Add(1) > after {
					return errKilled
				}
				return nil
			}
		case "after_mysql_commit":
			hooks.AfterApply = func(context.Context, mysqlsink.Result) error {
				if applied.Add(1) > after {
					return errKilled
				}
				return nil
			}
		}
		cfg := e.cfg
		cfg.Hooks = hooks
		r := e.start(t, cfg)
		select {
		case err := <-r.done:
			if !errors.Is(err, errKilled) {
				t.Fatalf("kill %d (%s): sink returned %v, want the kill", kill, stage, err)
			}
			r.cancel = nil
			kills[stage]++
			e.offsetsAgreeWithFacts(t, fmt.Sprintf("kill %d (%s)", kill, stage))
		case <-time.After(60 * time.Second):
			t.Fatalf("kill %d (%s after %d batches) never happened", kill, stage, after)
		}
	}
	t.Logf("kills by stage: %v", kills)

	// Then real processes killed with SIGKILL at random times: connections
	// drop mid-transaction, nothing is closed, nothing left cleanly.
	childEnv := e.childEnv(t)
	child := func() (*exec.Cmd, *testenv.SyncBuffer) {
		cmd := testenv.ChildCommand("^$", childEnv)
		out := &testenv.SyncBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, out
	}
	progress := func() (n int64) {
		for _, o := range stored(t, e.m.DB, e.cfg.Group) {
			n += max(o, 0)
		}
		return n
	}
	before := progress()
	for range 8 {
		cmd, _ := child()
		time.Sleep(time.Duration(300+rng.IntN(1200)) * time.Millisecond)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		kills["sigkill"]++
		e.offsetsAgreeWithFacts(t, "SIGKILL")
	}
	after := progress()
	t.Logf("kills: %v; the killed processes advanced the stored offsets from %d to %d", kills, before, after)
	if after <= before {
		t.Fatal("the SIGKILLed sink processes applied nothing: the kills exercised nothing")
	}
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	cmd, out := child()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	ends := e.endOffsets(t)
	deadline := time.Now().Add(90 * time.Second)
	for !e.caughtUp(t, e.cfg.Group, ends) {
		select {
		case err := <-exited:
			t.Fatalf("final sink process exited: %v\n%s", err, out)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatalf("final sink process did not catch up\n%s", out)
		}
	}
	// It may have caught up before it even started: SIGTERM only once it
	// handles the signal.
	testenv.Eventually(t, 30*time.Second, "the final sink process to handle SIGTERM", func() bool {
		return strings.Contains(out.String(), childReady)
	})
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := <-exited; err != nil {
		t.Fatalf("final sink process: %v\n%s", err, out)
	}
	if err := o.Check(ctx, e.m.DB); err != nil {
		t.Fatal(err)
	}
	if n := count(t, e.m.DB, "SELECT COUNT(*) FROM user_mic_event_consumption"); n != int64(len(o.Consumed)) {
		t.Fatalf("consumption rows %d, want %d", n, len(o.Consumed))
	}
}

// offsetsAgreeWithFacts fails t unless, in one snapshot of MySQL, the
// consumed event ids (mic ledger and pool inflow) are exactly the ids of
// the records below their partition's stored offset, read back from Kafka:
// a batch's facts and its offsets commit together or not at all. Facts
// ahead of the offsets would be replayed after a restart, which the
// event_id dedupe hides from every fact comparison.
func (e *env) offsetsAgreeWithFacts(t *testing.T, after string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tx, err := e.m.DB.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only
	next := map[string]map[int32]kgo.Offset{}
	ends := map[mysqlsink.TP]int64{}
	rows, err := tx.QueryContext(ctx, "SELECT topic, partition_id, next_offset FROM roomflow_sink_offsets WHERE consumer_group = ?", e.cfg.Group)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var tp mysqlsink.TP
		var n int64
		if err := rows.Scan(&tp.Topic, &tp.Partition, &n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			ends[tp] = n
			if next[tp.Topic] == nil {
				next[tp.Topic] = map[int32]kgo.Offset{}
			}
			next[tp.Topic][tp.Partition] = kgo.NewOffset().AtStart()
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	consumed := map[string]bool{}
	rows, err = tx.QueryContext(ctx, "SELECT event_id FROM user_mic_event_consumption UNION ALL SELECT event_id FROM lucky_pool_inflow_consumption")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		consumed[id] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}

	below := map[string]bool{}
	if len(ends) > 0 {
		cl, err := kgo.NewClient(kgo.SeedBrokers(e.k.Brokers...), kgo.ConsumePartitions(next))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		for len(ends) > 0 {
			fs := cl.PollFetches(ctx)
			if err := ctx.Err(); err != nil {
				t.Fatalf("after %s: reading the records below the stored offsets: %v (left %v)", after, err, ends)
			}
			fs.EachRecord(func(r *kgo.Record) {
				tp := mysqlsink.TP{Topic: r.Topic, Partition: r.Partition}
				end, ok := ends[tp]
				if !ok || r.Offset >= end {
					return
				}
				for _, h := range r.Headers {
					if h.Key == "event_id" {
						below[string(h.Value)] = true
					}
				}
				if r.Offset == end-1 {
					delete(ends, tp)
				}
			})
		}
	}
	var ahead, behind []string
	for id := range consumed {
		if !below[id] {
			ahead = append(ahead, id)
		}
	}
	for id := range below {
		if !consumed[id] {
			behind = append(behind, id)
		}
	}
	if len(ahead)+len(behind) > 0 {
		t.Fatalf("after %s: stored offsets and facts disagree: %d event ids consumed above the stored offsets (e.g. %q), %d below them not consumed (e.g. %q)",
			after, len(ahead), ahead[:min(3, len(ahead))], len(behind), behind[:min(3, len(behind))])
	}
}
