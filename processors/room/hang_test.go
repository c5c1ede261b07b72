package room_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/processors/room"
	"github.com/hyapp/roomflow/processors/room/roomtest"
	"github.com/hyapp/roomflow/processors/streams/rttest"
	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/schemas/roomv1"
)

// TestRuleTableHungOverManyPartitions: while MySQL hangs (the rule table
// write-locked: each rule load waits out its bound), lucky gifts at the
// head of several partitions stall those partitions; the processor keeps
// running rather than holding one transaction open past its timeout, and
// once MySQL answers every inflow is emitted exactly once. A 6 s
// transaction timeout keeps it short: without the bound, the first 10 s
// load outlives the transaction and the commit is fenced.
func TestRuleTableHungOverManyPartitions(t *testing.T) {
	e := newEnv(t)
	rule := roomtest.Rule("rose", "v1", 50000, 200000, 300000)
	roomtest.InsertRule(t, e.m.DB, rule)
	ctx := context.Background()
	conn, err := e.m.DB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "LOCK TABLES lucky_gift_rules WRITE"); err != nil {
		t.Fatal(err)
	}
	want := map[string]*activityv1.LuckyPoolInflow{}
	var recs []*kgo.Record
	for i := range 12 {
		c := luckyCase{eventID: fmt.Sprintf("evt-hung-%d", i), roomID: fmt.Sprintf("room-%d", i), gift: "rose", version: "v1", heat: 1000}
		want["LuckyPoolInflow:"+c.eventID] = expectInflow(c, rule)
		mic := roomtest.Envelope(fmt.Sprintf("evt-mic-%d", i), "RoomMicChanged", c.roomID, 1, 1, &roomv1.RoomMicChanged{UserId: int64(i + 1), Action: "up", MicSessionId: fmt.Sprintf("s-%d", i)})
		recs = append(recs, &kgo.Record{Topic: e.topics.RoomEvents, Key: []byte(c.roomID), Value: mic}, luckyRecord(e.topics.RoomEvents, c, 2))
	}
	e.produce(recs)
	cfg := fast(e.cfg, testenv.UniqueName(t))
	cfg.Runtime.TransactionTimeout = 6 * time.Second
	rt, err := room.New(cfg, e.rules)
	if err != nil {
		t.Fatal(err)
	}
	r := rttest.Start(rt)
	select {
	case err := <-r.Done:
		t.Fatalf("the processor stopped while MySQL hung: %v", err)
	case <-time.After(15 * time.Second):
	}
	if _, err := conn.ExecContext(ctx, "UNLOCK TABLES"); err != nil {
		t.Fatal(err)
	}
	out := e.read(e.topics.LuckyPoolInflow, len(want))
	r.Stop(t)
	checkInflow(t, out, want)
}
