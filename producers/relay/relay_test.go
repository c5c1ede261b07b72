package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/testenv"
)

// TestConcurrentWriters: 8 writers insert 50k rows while the relay runs;
// every event id is in Kafka exactly once, bytes as stored, and each
// room's versions keep their order.
func TestConcurrentWriters(t *testing.T) {
	k := newKafka(t)
	m := testenv.NewMySQL(t)
	cfg := testConfig(t, k)
	x := startRelay(t, cfg, m.DB, nil)

	const total = 50_000
	ctx := context.Background()
	start := time.Now()
	if err := writers(ctx, m.DB, "cw-", total, 8, 50, 64, 0); err != nil {
		t.Fatal(err)
	}
	t.Logf("inserted %d rows in %s", total, time.Since(start))
	waitCount(t, k, cfg.Topic, total, 90*time.Second)
	t.Logf("counted at %s", time.Since(start))
	if got := metric(t, x.reg, "roomflow_relay_is_leader"); got != 1 {
		t.Errorf("is_leader = %v while relaying alone, want 1", got)
	}
	deadline := time.Now().Add(10 * time.Second)
	for metric(t, x.reg, "roomflow_relay_lag_seconds") > 3 || metric(t, x.reg, "roomflow_relay_open_gaps") != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("caught up, yet lag %v s and %v open gaps", metric(t, x.reg, "roomflow_relay_lag_seconds"), metric(t, x.reg, "roomflow_relay_open_gaps"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	x.stop(t)
	if got := metric(t, x.reg, "roomflow_relay_is_leader"); got != 0 {
		t.Errorf("is_leader = %v after stop, want 0", got)
	}
	t.Logf("stopped at %s", time.Since(start))
	got := drain(t, k, cfg.Topic)
	t.Logf("drained at %s", time.Since(start))
	checkExactlyOnce(t, loadOracle(t, m.DB), got)
	t.Logf("checked at %s", time.Since(start))
	if got := metric(t, x.reg, "roomflow_relay_events_total", "result", "relayed"); got != total {
		t.Errorf("events_total{relayed} = %v, want %d", got, total)
	}
	if got := metric(t, x.reg, "roomflow_relay_gaps_abandoned_total", "reason", "max_age"); got != 0 {
		t.Errorf("gaps abandoned = %v, want 0 (no rollbacks)", got)
	}
	if got := metric(t, x.reg, "roomflow_relay_batches_total", "result", "committed"); got < total/1000 {
		t.Errorf("batches committed = %v, want at least %d", got, total/1000)
	}
	if got := metric(t, x.reg, "roomflow_relay_commit_duration_seconds"); got == 0 {
		t.Errorf("commit duration histogram is empty")
	}
}
