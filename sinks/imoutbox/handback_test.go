package imoutbox_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/sinks/tencentim/imfake"
)

// roomPerPartition is a room id for each of the n partitions of the room
// events topic, by the relay's key hash.
func roomPerPartition(n int) []string {
	part := kgo.StickyKeyPartitioner(nil).ForTopic("")
	rooms := make([]string, n)
	for i, found := 0, 0; found < n; i++ {
		room := fmt.Sprintf("room-%d", i)
		if p := part.Partition(&kgo.Record{Key: []byte(room)}, n); rooms[p] == "" {
			rooms[p] = room
			found++
		}
	}
	return rooms
}

// assignment waits until kfake's group has members members, each owning
// an equal part of the topic's partitions, and returns their assignments
// by member id.
func (e *env) assignment(members, partitions int) map[string][]int32 {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := e.k.Fake.WaitGroupInfo(ctx, e.cfg.Group, func(g *kfake.GroupInfo) bool {
		if g.State != "Stable" || len(g.Members) != members {
			return false
		}
		for _, m := range g.Members {
			if len(m.Assignment[e.cfg.Topic]) != partitions/members {
				return false
			}
		}
		return true
	})
	if err != nil {
		e.t.Fatalf("group never balanced over %d members: %v", members, err)
	}
	out := map[string][]int32{}
	for _, m := range info.Members {
		out[m.MemberID] = m.Assignment[e.cfg.Topic]
	}
	return out
}

// Finding 14: replica A's room chains are stuck behind a slow send (each
// room's first event takes longer than drain_timeout) when replica B joins
// and two partitions move to it. A's revoke stops its chains for the moved
// rooms: the send in flight finishes (within publish_timeout) and is
// recorded, the rows not yet sent are handed back before B starts, so B
// re-reads them from Kafka and sends them itself, before the events that
// arrive after the move. Every event reaches IM once and each room's in
// order; before the fix A kept the rows claimed (renewed) behind its slow
// send and sent them after B had sent the room's newer events.
func TestRevokeAfterDrainTimeoutHandsRowsBack(t *testing.T) {
	e := newEnv(t, true) // 4 partitions
	if e.k.Fake == nil {
		t.Skip("needs kfake's view of the group's assignment; ROOMFLOW_KAFKA_BROKERS is set")
	}
	e.cfg.DrainTimeout = time.Second
	e.cfg.PublishTimeout, e.cfg.LockTTL = 15*time.Second, 20*time.Second
	e.cfg.Kafka.SessionTimeout = 6 * time.Second // A hears of B's join within 2s (a heartbeat)
	const hang = 10 * time.Second                // past the revoke's drain, within publish_timeout
	rooms := roomPerPartition(4)
	arrived := make(chan string, len(rooms))
	var old, fresh []event
	for p, room := range rooms {
		for v := int64(1); v <= 8; v++ {
			ev := gift(fmt.Sprintf("hb-%d-%d", p, v), room, v)
			if v <= 5 {
				old = append(old, ev)
			} else {
				fresh = append(fresh, ev)
			}
		}
		e.fake.Inject(imfake.Fault{EventID: fmt.Sprintf("hb-%d-1", p), Delay: hang, Times: 1, Arrived: arrived})
	}
	raws := e.insert(0, append(old, fresh...)...)
	e.produce(raws, old)

	pa, regA := e.newPublisher(fastOnly)
	e.run(pa)
	for range rooms {
		select {
		case <-arrived:
		case <-time.After(20 * time.Second):
			t.Fatal("not every room's first send reached IM from replica A")
		}
	}
	var memberA string
	for id := range e.assignment(1, 4) {
		memberA = id
	}
	pb, _ := e.newPublisher(fastOnly)
	e.run(pb)
	var moved []int32
	for id, ps := range e.assignment(2, 4) {
		if id != memberA {
			moved = ps
		}
	}
	if len(moved) != 2 {
		t.Fatalf("partitions moved to B: %v, want 2", moved)
	}
	e.produce(raws, fresh)
	testenv.Eventually(t, 30*time.Second, "every event delivered", func() bool { return e.countStatus("delivered") == len(old)+len(fresh) })

	acc := e.fake.AcceptedByEvent()
	for _, ev := range append(old, fresh...) {
		if acc[ev.ID] != 1 {
			t.Errorf("%s accepted %d times, want once", ev.ID, acc[ev.ID])
		}
	}
	e.checkRoomOrder()
	for _, p := range moved {
		for v := 2; v <= 8; v++ {
			if r := e.row(fmt.Sprintf("hb-%d-%d", p, v)); r.WorkerID != pb.Service.WorkerID() {
				t.Errorf("moved room %s version %d sent by %s, want the new owner %s", rooms[p], v, r.WorkerID, pb.Service.WorkerID())
			}
		}
	}
	// A handed back the four rows queued behind each moved room's slow
	// send, and said so.
	released := metric(t, regA, "roomflow_im_outbox_events_total", map[string]string{"source": "fast", "outcome": "released"})
	if want := float64(4 * len(moved)); released != want {
		t.Fatalf("A released %v rows for the moved partitions %v, want %v", released, moved, want)
	}
	if !strings.Contains(e.logs.String(), "revoked partitions' events not all sent within shutdown.timeout") {
		t.Fatal("no warning that the revoke handed events back")
	}
}

// Finding 14, partitions lost: replica A's group session ends in error
// (kfake answers its heartbeat UNKNOWN_MEMBER_ID and refuses its joins)
// while its room chains still have rows to pace out. Its call budget drops
// to 0, and its chains stop and hand their unsent rows back at once: B,
// which then gets every partition, reads them again from Kafka and
// delivers every event once and each room in order. Before the fix A's
// chains waited at rate 0 for good with their claims renewed, and B
// skipped the rows as another worker's.
func TestLostPartitionsHandRowsBack(t *testing.T) {
	e := newEnv(t, false)
	e.k = testenv.NewKafka(t, testenv.Partitions(4), testenv.FakeOpts(fallbackKafka(t)...))
	if e.k.Fake == nil {
		t.Skip("needs kfake: a 1s group session (below a broker's group.min.session.timeout.ms) and fault injection; ROOMFLOW_KAFKA_BROKERS is set")
	}
	e.cfg.Topic, e.cfg.Kafka.Brokers = e.k.Config.Topics.RoomEvents, e.k.Brokers
	e.cfg.Kafka.SessionTimeout = time.Second // kfake expires A's member within a second
	e.cfg.IM.MaxCallsPerSecond = 200
	rooms := roomPerPartition(4)
	const paced = 120 // 3 s per room at the group limit of 40/s
	underway := make(chan string, len(rooms))
	var old, fresh []event
	for p, room := range rooms {
		for v := int64(1); v <= paced+3; v++ {
			ev := gift(fmt.Sprintf("lost-%d-%03d", p, v), room, v)
			if v <= paced {
				old = append(old, ev)
			} else {
				fresh = append(fresh, ev)
			}
		}
		e.fake.Inject(imfake.Fault{EventID: fmt.Sprintf("lost-%d-010", p), Times: 1, Arrived: underway})
	}
	raws := e.insert(0, append(old, fresh...)...)
	e.produce(raws, old)

	e.cfg.InstanceID = "replica-a" // kfake tells A's requests by it
	pa, regA := e.newPublisher(fastOnly)
	e.cfg.InstanceID = ""
	e.run(pa)
	select {
	case <-underway:
	case <-time.After(20 * time.Second):
		t.Fatal("replica A never got a room's tenth event out")
	}
	isA := func(req kmsg.Request) bool {
		switch r := req.(type) {
		case *kmsg.HeartbeatRequest:
			return r.InstanceID != nil && *r.InstanceID == "replica-a"
		case *kmsg.JoinGroupRequest:
			return r.InstanceID != nil && *r.InstanceID == "replica-a"
		}
		return false
	}
	e.k.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Heartbeat}, Err: kerr.UnknownMemberID, Count: -1, When: isA})
	e.k.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.JoinGroup}, Err: kerr.CoordinatorNotAvailable, Count: -1, When: isA})
	testenv.Eventually(t, 10*time.Second, "A's partitions lost", func() bool {
		return metric(t, regA, "roomflow_im_call_budget_per_second", nil) == 0
	})

	pb, _ := e.newPublisher(fastOnly)
	e.run(pb)
	e.assignment(1, 4)
	e.produce(raws, fresh)
	testenv.Eventually(t, 30*time.Second, "every event delivered", func() bool { return e.countStatus("delivered") == len(old)+len(fresh) })
	e.checkOnceEach(len(old) + len(fresh))
	e.checkRoomOrder()
	// Every row A claimed it either sent or handed back.
	claimed := metric(t, regA, "roomflow_im_outbox_claims_total", map[string]string{"source": "fast", "result": "claimed"})
	released := metric(t, regA, "roomflow_im_outbox_events_total", map[string]string{"source": "fast", "outcome": "released"})
	var byA int
	if err := e.db.QueryRow(`SELECT COUNT(*) FROM room_outbox WHERE worker_id = ?`, pa.Service.WorkerID()).Scan(&byA); err != nil {
		t.Fatal(err)
	}
	if released == 0 || claimed != float64(byA)+released {
		t.Fatalf("A claimed %v rows, sent %d and handed back %v; want every claim sent or handed back, some handed back", claimed, byA, released)
	}
}
