package relay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/producers/relay"
)

// TestReadCommittedPosition: next to a leading relay, ReadCommittedPosition
// returns its committed position without fencing it: before the first
// commit nothing; with an insert transaction held open, the hole of its id
// bounds RelayedBelow while the high-water id passes it; the relay keeps
// relaying afterwards.
func TestReadCommittedPosition(t *testing.T) {
	k := newKafka(t)
	m := testenv.NewMySQL(t)
	ctx := context.Background()
	cfg := testConfig(t, k)
	read := func() (relay.Position, bool) {
		t.Helper()
		pos, found, err := relay.ReadCommittedPosition(ctx, k.Cluster(), cfg.OffsetsTopic, cfg.TransactionalID)
		if err != nil {
			t.Fatal(err)
		}
		return pos, found
	}
	if _, found := read(); found {
		t.Fatal("a position before the relay ever committed")
	}
	rows := func(prefix string, n int) []outboxRow {
		var out []outboxRow
		for i := range n {
			id := fmt.Sprintf("%s-%d", prefix, i)
			out = append(out, outboxRow{eventID: id, eventType: "RoomMicChanged", roomID: "r", version: int64(i), payload: payloadFor(id, 50), occurred: 1})
		}
		return out
	}
	if err := insertRows(ctx, m.DB, rows("a", 5)); err != nil {
		t.Fatal(err)
	}
	open, err := m.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Rollback()
	if err := insertRows(ctx, open, rows("held", 1)); err != nil {
		t.Fatal(err)
	}
	var held uint64
	if err := open.QueryRowContext(ctx, "SELECT LAST_INSERT_ID()").Scan(&held); err != nil {
		t.Fatal(err)
	}
	if err := insertRows(ctx, m.DB, rows("b", 5)); err != nil {
		t.Fatal(err)
	}
	r := startRelay(t, cfg, m.DB, quietLogger(t))
	waitCount(t, k, cfg.Topic, 10, 30*time.Second)
	var pos relay.Position
	testenv.Eventually(t, 10*time.Second, "the committed position past the held id", func() bool {
		var found bool
		pos, found = read()
		return found && pos.High > held
	})
	if pos.RelayedBelow() != held || len(pos.Holes) != 1 || pos.Holes[0].ID != held {
		t.Fatalf("position %+v: want the held id %d as its only hole and RelayedBelow", pos, held)
	}
	if err := open.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := insertRows(ctx, m.DB, rows("c", 3)); err != nil {
		t.Fatal(err)
	}
	waitCount(t, k, cfg.Topic, 14, 30*time.Second) // the relay was not fenced
	testenv.Eventually(t, 10*time.Second, "the hole filled in the committed position", func() bool {
		p, _ := read()
		return len(p.Holes) == 0 && p.RelayedBelow() == p.High+1 && p.High > pos.High
	})
	r.stop(t)
}
