package relay_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/producers/relay"
)

// oldRows inserts n rows that occurred age ago.
func oldRows(t *testing.T, db *sql.DB, prefix string, n int, age time.Duration) {
	t.Helper()
	rows := make([]outboxRow, n)
	at := time.Now().Add(-age).UnixMilli()
	for i := range rows {
		id := fmt.Sprintf("%s%d", prefix, i)
		rows[i] = outboxRow{eventID: id, eventType: "RoomMicChanged", roomID: prefix + "room", version: int64(i + 1), payload: payloadFor(id, 32), occurred: at}
	}
	if err := insertRows(context.Background(), db, rows); err != nil {
		t.Fatal(err)
	}
}

// growing asserts that roomflow_relay_lag_seconds of every x grows with
// the wall clock over d, and is at least min at the end.
func growing(t *testing.T, what string, d time.Duration, least float64, xs ...*running) {
	t.Helper()
	before := make([]float64, len(xs))
	for i, x := range xs {
		before[i] = metric(t, x.reg, "roomflow_relay_lag_seconds")
	}
	time.Sleep(d)
	for i, x := range xs {
		after := metric(t, x.reg, "roomflow_relay_lag_seconds")
		if after-before[i] < d.Seconds()*0.8 || after < least {
			t.Errorf("%s: replica %d's lag went from %.2fs to %.2fs over %s: want it to grow with the clock and reach %.1fs", what, i, before[i], after, d, least)
		}
	}
}

// roomflow_relay_lag_seconds is how old the oldest committed, unrelayed
// row is, on the leader and on a standby alike: it is small once the
// relay caught up with rows that occurred an hour ago (so both know the
// committed position), and it keeps growing, on both replicas, while the
// leader is stuck and commits nothing. It means the same in both modes.
func TestRelayLagGrowsWithoutCommits(t *testing.T) { forModes(t, testRelayLagGrowsWithoutCommits) }

func testRelayLagGrowsWithoutCommits(t *testing.T, mode relayMode) {
	k := newKafka(t)
	m := mode.mysql(t)
	cfg := mode.config(testConfig(t, k), m)
	oldRows(t, m.DB, "old-", 20, time.Hour)

	var stuck atomic.Bool
	a := startRelay(t, withHooks(cfg, relay.Hooks{BeforeCommit: func(ctx context.Context, _ relay.BatchInfo) {
		if stuck.Load() {
			<-ctx.Done() // the leader hangs until it stops
		}
	}}), m.DB, quietLogger(t))
	waitCount(t, k, cfg.Topic, 20, 30*time.Second)
	b := startRelay(t, cfg, m.DB, quietLogger(t))
	for _, x := range []*running{a, b} {
		testenv.Eventually(t, 15*time.Second, "a lag below 3s once the hour-old rows are relayed", func() bool {
			return metric(t, x.reg, "roomflow_relay_lag_seconds") < 3
		})
	}
	if metric(t, b.reg, "roomflow_relay_is_leader") != 0 {
		t.Fatal("the second replica leads; the test needs it on standby")
	}

	stuck.Store(true)
	inserted := time.Now()
	oldRows(t, m.DB, "new-", 1, 0)
	// Within a refresh or two the replicas find the new row: from then on
	// the lag is its age, growing with the clock.
	for _, x := range []*running{a, b} {
		testenv.Eventually(t, 10*time.Second, "the lag to be the unrelayed row's age", func() bool {
			lag, age := metric(t, x.reg, "roomflow_relay_lag_seconds"), time.Since(inserted).Seconds()
			return lag > age-0.3 && lag < age+0.3
		})
	}
	growing(t, "leader stuck before its commit", 2500*time.Millisecond, 2.5, a, b)
}

// A relay that cannot read MySQL keeps reporting a growing lag instead of
// the value it had when MySQL went away. In binlog mode the stream has a
// connection of its own: the server ends it too (KILL of its dump thread).
func TestRelayLagGrowsWithoutMySQL(t *testing.T) { forModes(t, testRelayLagGrowsWithoutMySQL) }

func testRelayLagGrowsWithoutMySQL(t *testing.T, mode relayMode) {
	k := newKafka(t)
	m := mode.mysql(t)
	cfg := mode.config(testConfig(t, k), m)
	oldRows(t, m.DB, "old-", 5, time.Hour)
	db, err := sql.Open("mysql", m.DSN)
	if err != nil {
		t.Fatal(err)
	}
	x := startRelay(t, cfg, db, quietLogger(t))
	waitCount(t, k, cfg.Topic, 5, 30*time.Second)
	testenv.Eventually(t, 15*time.Second, "a lag below 3s once caught up", func() bool {
		return metric(t, x.reg, "roomflow_relay_lag_seconds") < 3
	})
	if err := db.Close(); err != nil { // every read of the relay fails from here on
		t.Fatal(err)
	}
	if cfg.Mode == relay.ModeBinlog && killBinlogDumps(t, m.DB) == 0 {
		t.Fatal("no binlog stream to end")
	}
	growing(t, "MySQL unreachable", 3*time.Second, 3, x)
}
