package relay_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/producers/relay"
)

func seq(prefix string, from, n int, room string) []outboxRow {
	rows := make([]outboxRow, n)
	for i := range rows {
		id := fmt.Sprintf("%s%d", prefix, from+i)
		rows[i] = outboxRow{eventID: id, eventType: "RoomGiftSent", roomID: room, version: int64(from + i),
			payload: payloadFor(id, 32), occurred: time.Now().UnixMilli()}
	}
	return rows
}

// TestOutOfOrderCommit: id N is held by an open transaction while
// N+1..N+1000 commit; the relay moves past N, relays N when it commits 5s
// later, and gives up a rolled-back id after gap_max_age without ever
// blocking progress. In binlog mode the late row arrives with its commit;
// the rolled-back id, never in the binlog, leaves the poll fallback's
// holes as poll mode gives it up: a gap_abandoned record, a count and a
// warning (a later switch to poll mode would not wait for it either).
func TestOutOfOrderCommit(t *testing.T) { forModes(t, testOutOfOrderCommit) }

func testOutOfOrderCommit(t *testing.T, mode relayMode) {
	k := newKafka(t)
	m := mode.mysql(t)
	cfg := mode.config(testConfig(t, k), m)
	cfg.GapMaxAge = 7 * time.Second
	logs := &testenv.SyncBuffer{}
	x := startRelay(t, cfg, m.DB, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})))
	ctx := context.Background()
	topic := cfg.Topic

	if err := insertRows(ctx, m.DB, seq("a", 1, 10, "room-a")); err != nil {
		t.Fatal(err)
	}
	waitCount(t, k, topic, 10, 30*time.Second)

	held, err := m.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Rollback()
	if err := insertRows(ctx, held, []outboxRow{{eventID: "held", eventType: "RoomGiftSent", roomID: "room-held", version: 1,
		payload: []byte("late"), occurred: time.Now().UnixMilli()}}); err != nil {
		t.Fatal(err)
	}
	heldAt := time.Now()
	var heldID uint64
	if err := held.QueryRowContext(ctx, "SELECT LAST_INSERT_ID()").Scan(&heldID); err != nil {
		t.Fatal(err)
	}
	rb, err := m.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := insertRows(ctx, rb, []outboxRow{{eventID: "rolled-back", eventType: "RoomGiftSent", roomID: "room-rb", version: 1,
		payload: []byte("never"), occurred: time.Now().UnixMilli()}}); err != nil {
		t.Fatal(err)
	}
	var rbID uint64
	if err := rb.QueryRowContext(ctx, "SELECT LAST_INSERT_ID()").Scan(&rbID); err != nil {
		t.Fatal(err)
	}
	if err := rb.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := insertRows(ctx, m.DB, seq("b", 1, 1000, "room-b")); err != nil {
		t.Fatal(err)
	}
	t.Logf("held id %d, rolled-back id %d", heldID, rbID)

	// The 1000 later rows are relayed while N is still invisible.
	waitCount(t, k, topic, 1010, 30*time.Second)
	// The gauge is set after the commit a consumer may already have seen.
	for got := float64(0); got != 2; {
		if got = metric(t, x.reg, "roomflow_relay_open_gaps"); got != 2 && time.Since(heldAt) > 4*time.Second {
			t.Errorf("open gaps = %v while N is held and the rollback is fresh, want 2", got)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}

	time.Sleep(time.Until(heldAt.Add(5 * time.Second)))
	if err := held.Commit(); err != nil {
		t.Fatal(err)
	}
	waitCount(t, k, topic, 1011, 30*time.Second)

	// The rolled-back id is abandoned once older than gap_max_age.
	testenv.Eventually(t, 20*time.Second, fmt.Sprintf("rolled-back id %d to be abandoned (gap_max_age)", rbID), func() bool {
		return metric(t, x.reg, "roomflow_relay_gaps_abandoned_total", "reason", "max_age") >= 1
	})
	if got := metric(t, x.reg, "roomflow_relay_gaps_abandoned_total", "reason", "max_age"); got != 1 {
		t.Errorf("abandoned = %v, want exactly 1 (only the rolled-back id)", got)
	}
	if got := metric(t, x.reg, "roomflow_relay_open_gaps"); got != 0 {
		t.Errorf("open gaps = %v after abandoning, want 0", got)
	}
	if err := insertRows(ctx, m.DB, seq("c", 1, 5, "room-c")); err != nil {
		t.Fatal(err)
	}
	waitCount(t, k, topic, 1016, 30*time.Second)
	x.stop(t)

	log := logs.String()
	if !strings.Contains(log, "level=WARN msg=\"outbox gap abandoned\"") || !strings.Contains(log, fmt.Sprintf("from_id=%d to_id=%d", rbID, rbID)) {
		t.Errorf("no warn log for the abandoned id %d:\n%s", rbID, log)
	}
	// The abandoned id is on record in the DLQ, committed with the position.
	dlq := drain(t, k, cfg.DLQTopic)
	if len(dlq) != 1 || dlq[0].headers["error_reason"] != "gap_abandoned" || dlq[0].headers["gap_reason"] != "max_age" ||
		dlq[0].headers["source_id_from"] != fmt.Sprint(rbID) || dlq[0].headers["source_id_to"] != fmt.Sprint(rbID) {
		t.Errorf("dlq = %+v, want one gap_abandoned record for id %d", dlq, rbID)
	}
	got := drain(t, k, topic)
	checkExactlyOnce(t, loadOracle(t, m.DB), got)
	for _, r := range got {
		if r.eventID() == "held" && string(r.value) != "late" {
			t.Errorf("held row value %q", r.value)
		}
	}
}

// TestBinlogGapAbandonedBeforeSwitch: in binlog mode an id held by an
// open transaction past gap_max_age leaves the position's holes (at the
// next batch); the relay is then switched to poll mode and the
// transaction commits. Poll mode does not wait for an id no longer a hole,
// so that row is not relayed, and the DLQ holds the gap_abandoned record
// operations.md promises for it (binlog mode on MariaDB used to drop the
// hole without one).
func TestBinlogGapAbandonedBeforeSwitch(t *testing.T) {
	k := newKafka(t)
	m := binlogDB(t)
	poll := testConfig(t, k)
	poll.GapMaxAge = 2 * time.Second
	held := holdOneInsert(t, m.DB)
	var heldID uint64
	if err := held.QueryRowContext(context.Background(), "SELECT LAST_INSERT_ID()").Scan(&heldID); err != nil {
		t.Fatal(err)
	}
	x := startRelay(t, binlogConfig(poll, m), m.DB, quietLogger(t))
	waitCount(t, k, poll.Topic, 10, 30*time.Second)
	time.Sleep(poll.GapMaxAge + 500*time.Millisecond)
	if err := insertRows(context.Background(), m.DB, seq("later-", 11, 1, "room-1")); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "the held id to leave the open gaps (gap_max_age)", func() bool {
		return metric(t, x.reg, "roomflow_relay_open_gaps") == 0
	})
	x.stop(t)
	if err := held.Commit(); err != nil {
		t.Fatal(err)
	}
	y := startRelay(t, poll, m.DB, quietLogger(t))
	if err := insertRows(context.Background(), m.DB, seq("later-", 12, 1, "room-1")); err != nil {
		t.Fatal(err)
	}
	waitCount(t, k, poll.Topic, 12, 30*time.Second)
	time.Sleep(300 * time.Millisecond)
	y.stop(t)
	for _, r := range drain(t, k, poll.Topic) {
		if r.eventID() == "held" {
			t.Errorf("the row of a gap given up was relayed after the switch")
		}
	}
	dlq := drain(t, k, poll.DLQTopic)
	if len(dlq) != 1 || dlq[0].headers["error_reason"] != "gap_abandoned" || dlq[0].headers["gap_reason"] != "max_age" ||
		dlq[0].headers["source_id_from"] != fmt.Sprint(heldID) || dlq[0].headers["source_id_to"] != fmt.Sprint(heldID) {
		t.Errorf("dlq = %+v, want one gap_abandoned record for the held id %d", dlq, heldID)
	}
}

// TestFirstStartBelowLowestID: a relay with no position starts just below
// the lowest id present (less one batch), so purged early rows do not turn
// into a hundred thousand holes, and everything present is relayed.
func TestFirstStartBelowLowestID(t *testing.T) { forModes(t, testFirstStartBelowLowestID) }

func testFirstStartBelowLowestID(t *testing.T, mode relayMode) {
	k := newKafka(t)
	m := mode.mysql(t)
	cfg := mode.config(testConfig(t, k), m)
	cfg.BatchSize = 100
	ctx := context.Background()
	if _, err := m.DB.ExecContext(ctx, "ALTER TABLE room_outbox AUTO_INCREMENT = 500000"); err != nil {
		t.Fatal(err)
	}
	if err := insertRows(ctx, m.DB, seq("late-table-", 1, 250, "room-l")); err != nil {
		t.Fatal(err)
	}
	x := startRelay(t, cfg, m.DB, nil)
	waitCount(t, k, cfg.Topic, 250, 30*time.Second)
	if got := metric(t, x.reg, "roomflow_relay_open_gaps"); got > float64(cfg.BatchSize) {
		t.Errorf("open gaps = %v after a first start on a table starting at id 500000, want at most one batch (%d)", got, cfg.BatchSize)
	}
	if got := metric(t, x.reg, "roomflow_relay_gaps_abandoned_total", "reason", "max_open_gaps"); got != 0 {
		t.Errorf("abandoned %v ids at first start", got)
	}
	x.stop(t)
	checkExactlyOnce(t, loadOracle(t, m.DB), drain(t, k, cfg.Topic))
}

// TestFirstStartInFlightBelowLowestID: at a relay's first start, two
// writers' transactions are still open with ids below every committed row
// (ids 1-20 in flight, 21-30 committed), more than one batch below the
// lowest committed id. They commit after the relay led, and every row is
// relayed once: the start position counts the open inserts. (Before, it
// started one batch below the lowest committed id and passed ids 1-10.)
func TestFirstStartInFlightBelowLowestID(t *testing.T) {
	forModes(t, testFirstStartInFlightBelowLowestID)
}

func testFirstStartInFlightBelowLowestID(t *testing.T, mode relayMode) {
	k := newKafka(t)
	m := mode.mysql(t)
	cfg := mode.config(testConfig(t, k), m)
	cfg.BatchSize = 10
	ctx := context.Background()
	var open []*sql.Tx
	for i := range 2 {
		tx, err := m.DB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback() })
		if err := insertRows(ctx, tx, seq(fmt.Sprintf("in-flight-%d-", i), 1, 10, fmt.Sprintf("room-f%d", i))); err != nil {
			t.Fatal(err)
		}
		open = append(open, tx)
	}
	if err := insertRows(ctx, m.DB, seq("committed-", 1, 10, "room-c")); err != nil {
		t.Fatal(err)
	}
	x := startRelay(t, cfg, m.DB, nil)
	waitCount(t, k, cfg.Topic, 10, 30*time.Second)
	for _, tx := range open {
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if n, ok := countWithin(t, k, cfg.Topic, 30, 10*time.Second); !ok {
		t.Errorf("%d of 30 rows relayed", n)
	}
	x.stop(t)
	checkExactlyOnce(t, loadOracle(t, m.DB), drain(t, k, cfg.Topic))
}

// TestHoleSurvivesRestart: the open holes are part of the committed
// position, so a row that commits late is relayed by the next relay
// after a restart, once.
func TestHoleSurvivesRestart(t *testing.T) { forModes(t, testHoleSurvivesRestart) }

func testHoleSurvivesRestart(t *testing.T, mode relayMode) {
	k := newKafka(t)
	m := mode.mysql(t)
	cfg := mode.config(testConfig(t, k), m)
	topic := cfg.Topic

	held := holdOneInsert(t, m.DB)
	x := startRelay(t, cfg, m.DB, nil)
	waitCount(t, k, topic, 10, 30*time.Second)
	x.stop(t)
	if got := metric(t, x.reg, "roomflow_relay_open_gaps"); got != 1 {
		t.Fatalf("open gaps = %v with one insert in flight, want 1", got)
	}
	if err := held.Commit(); err != nil {
		t.Fatal(err)
	}
	y := startRelay(t, cfg, m.DB, nil)
	waitCount(t, k, topic, 11, 30*time.Second)
	y.stop(t)
	if got := metric(t, y.reg, "roomflow_relay_events_total", "result", "relayed"); got != 1 {
		t.Errorf("restarted relay relayed %v rows, want only the late one", got)
	}
	checkExactlyOnce(t, loadOracle(t, m.DB), drain(t, k, topic))
}

// TestRestoredGapsIgnoreClockSkew: a relay whose wall clock is 3 hours
// behind leaves an open hole in its position; a relay with the right clock
// takes over with relay.gap_max_age 1h. The hole is still waited for (it
// has been open for seconds, not hours) and its row is relayed when it
// commits. Today's relay ages restored holes by the new leader's wall
// clock against the old leader's and abandons it at once.
func TestRestoredGapsIgnoreClockSkew(t *testing.T) { forModes(t, testRestoredGapsIgnoreClockSkew) }

func testRestoredGapsIgnoreClockSkew(t *testing.T, mode relayMode) {
	k := newKafka(t)
	m := mode.mysql(t)
	cfg := mode.config(testConfig(t, k), m)
	cfg.GapMaxAge = time.Hour
	ctx := context.Background()
	topic := cfg.Topic

	held := holdOneInsert(t, m.DB)
	behind := func() time.Time { return time.Now().Add(-3 * time.Hour) }
	behindCfg := cfg
	behindCfg.Now = behind
	x := startRelay(t, behindCfg, m.DB, nil)
	waitCount(t, k, topic, 10, 30*time.Second)
	x.stop(t)
	if got := metric(t, x.reg, "roomflow_relay_open_gaps"); got != 1 {
		t.Fatalf("open gaps = %v with one insert in flight, want 1", got)
	}

	y := startRelay(t, cfg, m.DB, nil)
	// A committed row after the takeover proves the new leader has read
	// (and expired) its restored holes at least once.
	if err := insertRows(ctx, m.DB, seq("later-", 11, 1, "room-1")); err != nil {
		t.Fatal(err)
	}
	waitCount(t, k, topic, 11, 30*time.Second)
	if got := metric(t, y.reg, "roomflow_relay_gaps_abandoned_total", "reason", "max_age"); got != 0 {
		t.Fatalf("new leader abandoned %v restored gaps open for seconds (gap_max_age 1h)", got)
	}
	if err := held.Commit(); err != nil {
		t.Fatal(err)
	}
	waitCount(t, k, topic, 12, 30*time.Second)
	y.stop(t)
	checkExactlyOnce(t, loadOracle(t, m.DB), drain(t, k, topic))
}

// TestIDReissueStops: after the relay passed id 20 the table is truncated,
// so MySQL hands out ids 1.. again (as after a failover to a replica that
// lagged). The relay must not skip those rows silently: it stops with an
// error naming the table and both numbers and sets
// roomflow_relay_id_reissue_detected; once AUTO_INCREMENT is above the
// high-water id again it resumes by itself. In binlog mode ids are not
// the position: the reissued rows reach the binlog as new commits and are
// relayed, once, without a stop.
func TestIDReissueStops(t *testing.T) { forModes(t, testIDReissueStops) }

func testIDReissueStops(t *testing.T, mode relayMode) {
	k := newKafka(t)
	m := mode.mysql(t)
	cfg := mode.config(testConfig(t, k), m)
	ctx := context.Background()
	topic := cfg.Topic
	logs := &testenv.SyncBuffer{}
	x := startRelay(t, cfg, m.DB, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})))
	if err := insertRows(ctx, m.DB, seq("first-", 1, 20, "room-1")); err != nil {
		t.Fatal(err)
	}
	waitCount(t, k, topic, 20, 30*time.Second)
	if got := metric(t, x.reg, "roomflow_relay_id_reissue_detected"); got != 0 {
		t.Fatalf("reissue gauge = %v before any reissue", got)
	}
	if _, err := m.DB.ExecContext(ctx, "TRUNCATE TABLE room_outbox"); err != nil {
		t.Fatal(err)
	}
	if err := insertRows(ctx, m.DB, seq("reissued-", 1, 5, "room-2")); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	}()
	if cfg.Mode == relay.ModeBinlog {
		waitCount(t, k, topic, 25, 30*time.Second)
		if got := metric(t, x.reg, "roomflow_relay_id_reissue_detected"); got != 0 {
			t.Errorf("reissue gauge = %v in binlog mode, which reads commits, not ids", got)
		}
		x.stop(t)
		reissued := 0
		for _, r := range drain(t, k, topic) {
			if strings.HasPrefix(r.eventID(), "reissued-") {
				reissued++
			}
		}
		if reissued != 5 {
			t.Errorf("binlog mode relayed %d of the 5 reissued rows, want each once", reissued)
		}
		return
	}
	// The gauge is set before the session's error is logged.
	testenv.Eventually(t, 30*time.Second, "roomflow_relay_id_reissue_detected = 1 and an error log naming the table, AUTO_INCREMENT 6 and high 20", func() bool {
		return metric(t, x.reg, "roomflow_relay_id_reissue_detected") == 1 &&
			strings.Contains(logs.String(), "level=ERROR msg=\"ids are being reissued; relaying stopped until AUTO_INCREMENT is above the high-water id again\"") &&
			strings.Contains(logs.String(), "error=\"relay: room_outbox AUTO_INCREMENT 6 is at or below the relayed high-water id 20")
	})
	// Past the reissued range: rows are relayed again and the gauge clears.
	if _, err := m.DB.ExecContext(ctx, "ALTER TABLE room_outbox AUTO_INCREMENT = 100"); err != nil {
		t.Fatal(err)
	}
	if err := insertRows(ctx, m.DB, seq("resumed-", 1, 3, "room-3")); err != nil {
		t.Fatal(err)
	}
	waitCount(t, k, topic, 23, 60*time.Second)
	testenv.Eventually(t, 30*time.Second, "roomflow_relay_id_reissue_detected = 0", func() bool {
		return metric(t, x.reg, "roomflow_relay_id_reissue_detected") == 0
	})
	x.stop(t)
	got := drain(t, k, topic)
	for _, r := range got {
		if strings.HasPrefix(r.eventID(), "reissued-") {
			t.Errorf("reissued row %s relayed although its id is below the high-water mark", r.eventID())
		}
	}
}

// holdOneInsert commits rows before-1..5, inserts row "held" in a
// transaction it leaves open (rolled back at the end of the test), and
// commits rows after-6..10: one hole, ten rows.
func holdOneInsert(t *testing.T, db *sql.DB) *sql.Tx {
	t.Helper()
	ctx := context.Background()
	held, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = held.Rollback() })
	if err := insertRows(ctx, db, seq("before-", 1, 5, "room-1")); err != nil {
		t.Fatal(err)
	}
	if err := insertRows(ctx, held, []outboxRow{{eventID: "held", eventType: "RoomGiftSent", roomID: "room-held", version: 1,
		payload: []byte("late"), occurred: time.Now().UnixMilli()}}); err != nil {
		t.Fatal(err)
	}
	if err := insertRows(ctx, db, seq("after-", 6, 5, "room-1")); err != nil {
		t.Fatal(err)
	}
	return held
}

// TestLateRowKeepsRoomOrderInFullBatches: a hole's row commits, then the
// next row of its room is inserted, while the relay works through a
// backlog in full batches, all within one poll interval. The late row must
// still be relayed before its room's next row. Today's relay looks holes up
// only once per poll interval while batches are full, so the later row
// overtakes it.
func TestLateRowKeepsRoomOrderInFullBatches(t *testing.T) {
	forModes(t, testLateRowKeepsRoomOrderInFullBatches)
}

func testLateRowKeepsRoomOrderInFullBatches(t *testing.T, mode relayMode) {
	k := newKafka(t)
	m := mode.mysql(t)
	cfg := mode.config(testConfig(t, k), m)
	cfg.BatchSize = 5
	cfg.PollInterval = 3 * time.Second
	ctx := context.Background()
	topic := cfg.Topic
	held, err := m.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Rollback()
	if err := insertRows(ctx, held, seq("r-v", 1, 1, "room-r")); err != nil {
		t.Fatal(err)
	}
	if err := insertRows(ctx, m.DB, seq("x-", 1, 1, "room-x")); err != nil {
		t.Fatal(err)
	}
	x := startRelay(t, cfg, m.DB, nil)
	waitCount(t, k, topic, 1, 30*time.Second)
	x.stop(t) // the held row is an open hole in the position

	if err := insertRows(ctx, m.DB, seq("fill-", 1, 50, "room-f")); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	hookErr := make(chan error, 1)
	y := startRelay(t, withHooks(cfg, relay.Hooks{BeforeCommit: func(context.Context, relay.BatchInfo) {
		once.Do(func() {
			// Room r's next row may only be inserted once its first committed;
			// it lands in a full batch (four more rows after it).
			err := held.Commit()
			if err == nil {
				err = insertRows(ctx, m.DB, append(seq("r-v", 2, 1, "room-r"), seq("more-", 1, 4, "room-m")...))
			}
			hookErr <- err
		})
	}}), m.DB, nil)
	if err := <-hookErr; err != nil {
		t.Fatal(err)
	}
	waitCount(t, k, topic, 57, 30*time.Second)
	y.stop(t)
	checkExactlyOnce(t, loadOracle(t, m.DB), drain(t, k, topic))
}
