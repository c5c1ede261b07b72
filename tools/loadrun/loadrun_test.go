package loadrun

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/producers/loadgen"
)

// TestScenarioWrites writes the fixed scenario into room_outbox and into
// the room events topic: every event lands once, the rule is seeded, and
// the summary names the count and the oracle; an unknown destination
// fails.
func TestScenarioWrites(t *testing.T) {
	k := testenv.NewKafka(t)
	m := testenv.NewMySQL(t)
	cfg := testenv.Config(t, k, m)
	sc := loadgen.DefaultScenario()
	sc.Sessions, sc.Gifts, sc.EventIDPrefix = 40, 60, testenv.UniqueName(t)
	events, _ := sc.Generate()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, to := range []string{"mysql", "kafka"} {
		var out bytes.Buffer
		if err := Scenario(ctx, cfg, sc, Options{To: to, Batch: 50, Out: &out}); err != nil {
			t.Fatalf("--to %s: %v\n%s", to, err, out.String())
		}
		if want := fmt.Sprintf("wrote %d events to %s in ", len(events), to); !strings.Contains(out.String(), want) || !strings.Contains(out.String(), "expected: ") {
			t.Fatalf("--to %s printed %q, want %q and the oracle", to, out.String(), want)
		}
	}
	var rows, rules int
	if err := m.DB.QueryRow("SELECT COUNT(*) FROM room_outbox").Scan(&rows); err != nil || rows != len(events) {
		t.Fatalf("room_outbox holds %d rows (%v), want %d", rows, err, len(events))
	}
	if err := m.DB.QueryRow("SELECT COUNT(*) FROM lucky_gift_rules WHERE gift_id = ?", sc.Rule.GiftID).Scan(&rules); err != nil || rules != 1 {
		t.Fatalf("lucky_gift_rules holds %d rows of %s (%v), want the seeded one", rules, sc.Rule.GiftID, err)
	}
	if recs := k.DrainCommitted(t, cfg.Kafka.Topics.RoomEvents); len(recs) != len(events) {
		t.Fatalf("the room events topic holds %d records, want %d", len(recs), len(events))
	}
	var out bytes.Buffer
	if err := Scenario(ctx, cfg, sc, Options{To: "elsewhere", Out: &out}); err == nil || !strings.Contains(err.Error(), "--to must be mysql or kafka") {
		t.Fatalf("--to elsewhere: %v", err)
	}
}
