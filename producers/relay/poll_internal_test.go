package relay

import (
	"bytes"
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/testenv"
)

// TestFoundHolesLeftByTheBudgetAreNotExpired: a transaction's rows that
// commit just before gap_max_age are found by the hole lookup, but the byte
// budget takes one per batch; the rest wait for the next batches while
// their holes pass gap_max_age. They are still relayed, none given up; a
// hole whose row never appears is given up as before. The reader runs
// batch by batch on a clock that moves a second per batch.
func TestFoundHolesLeftByTheBudgetAreNotExpired(t *testing.T) {
	m := testenv.NewMySQL(t)
	ctx := context.Background()
	clock := time.UnixMilli(1_700_000_000_000)
	r, err := New(Config{TransactionalID: testenv.UniqueName(t), Topic: "events", DLQTopic: "dlq", OffsetsTopic: "offsets",
		Kafka:     kafkax.Cluster{Brokers: []string{testenv.ClosedAddr(t)}},
		GapMaxAge: 10 * time.Second, MaxBatchBytes: 100_000, Now: func() time.Time { return clock }}, m.DB)
	if err != nil {
		t.Fatal(err)
	}
	insert := func(payloadBytes int, ids ...int) {
		t.Helper()
		for _, id := range ids {
			if _, err := m.DB.ExecContext(ctx, `INSERT INTO room_outbox (id, app_code, event_id, event_type, room_id, room_version,
				payload, occurred_at_ms, created_at_ms, updated_at_ms) VALUES (?, 'hyapp', ?, 'RoomMicChanged', 'room-h', ?, ?, 1, 1, 1)`,
				id, "e"+string(rune('0'+id)), id, bytes.Repeat([]byte{7}, payloadBytes)); err != nil {
				t.Fatal(err)
			}
		}
	}
	p := &pollReader{r: r, tr: NewTracker(Position{}, 100, r.cfg.GapMaxAge, clock)}
	var relayed []uint64
	var abandoned []Abandoned
	step := func() bool {
		t.Helper()
		b, _, err := p.next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if b == nil {
			return false
		}
		relayed = appendRowIDs(relayed, b.rows)
		abandoned = append(abandoned, b.abandoned...)
		return true
	}

	insert(10, 1, 6, 9) // 2-5, 7 and 8 become holes, first seen now
	step()
	// 2-5 commit one second before they would be given up: 60 kB rows, a
	// 100 kB budget, so one row per batch.
	clock = clock.Add(r.cfg.GapMaxAge - time.Second)
	insert(60_000, 2, 3, 4, 5)
	for i := 0; i < 10 && step(); i++ {
		clock = clock.Add(time.Second)
	}
	if want := []uint64{1, 6, 9, 2, 3, 4, 5}; !reflect.DeepEqual(relayed, want) {
		t.Errorf("relayed ids %v, want %v", relayed, want)
	}
	if len(abandoned) != 1 || abandoned[0].From != 7 || abandoned[0].To != 8 || abandoned[0].Reason != AbandonMaxAge {
		t.Errorf("abandoned %+v, want only 7-8 (max_age)", abandoned)
	}
}
