package streams

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// assignment is what this member owns in the consumer group (Kafka
// Streams' TaskManager): the group's assignment changes as the session's
// callbacks hand them over, queued for the processing loop, and the tasks
// of the partitions owned, with their stores and state gauges. It answers
// the membership check of a commit without offsets and publishes the owned
// partitions for Assigned.
type assignment struct {
	sh       *shared
	evMu     sync.Mutex
	events   []partEvent
	tasks    map[int32]*task
	assigned atomic.Pointer[[]int32] // published copy of the tasks' partitions
}

type partEventKind int

const (
	evAssigned partEventKind = iota
	evRevoked
)

type partEvent struct {
	kind       partEventKind
	partitions []int32
}

func (a *assignment) init(sh *shared) {
	a.sh = sh
	a.tasks = map[int32]*task{}
}

// hooks are the session's group callbacks: each change is logged and
// queued for the loop (takeEvents). A loss is handled as a revoke.
func (a *assignment) hooks() []kgo.Opt {
	in := a.sh.cfg.Input
	return []kgo.Opt{
		kgo.OnPartitionsAssigned(func(_ context.Context, cl *kgo.Client, m map[string][]int32) {
			a.logGroupChange(cl, "partitions assigned", m[in])
			a.push(evAssigned, m[in])
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, cl *kgo.Client, m map[string][]int32) {
			a.logGroupChange(cl, "partitions revoked", m[in])
			a.push(evRevoked, m[in])
		}),
		kgo.OnPartitionsLost(func(_ context.Context, cl *kgo.Client, m map[string][]int32) {
			a.logGroupChange(cl, "partitions lost", m[in])
			a.push(evRevoked, m[in])
		}),
	}
}

func (a *assignment) push(kind partEventKind, ps []int32) {
	if len(ps) == 0 {
		return
	}
	a.evMu.Lock()
	a.events = append(a.events, partEvent{kind: kind, partitions: append([]int32(nil), ps...)})
	a.evMu.Unlock()
}

// logGroupChange logs an assignment change as the group hands it over,
// with the member and generation: the record of who owned what, when.
func (a *assignment) logGroupChange(cl *kgo.Client, msg string, ps []int32) {
	if len(ps) == 0 {
		return
	}
	member, gen := cl.GroupMetadata()
	a.sh.log.Info(msg, "partitions", fmt.Sprint(ps), "member_id", member, "generation", gen)
}

func (a *assignment) takeEvents() []partEvent {
	a.evMu.Lock()
	defer a.evMu.Unlock()
	ev := a.events
	a.events = nil
	return ev
}

// eventsPending reports whether an assignment change waits for the loop.
func (a *assignment) eventsPending() bool {
	a.evMu.Lock()
	defer a.evMu.Unlock()
	return len(a.events) > 0
}

// task is partition p's task, nil if not owned.
func (a *assignment) task(p int32) *task { return a.tasks[p] }

// partitions are the owned partitions, in no particular order.
func (a *assignment) partitions() []int32 {
	ps := make([]int32, 0, len(a.tasks))
	for p := range a.tasks {
		ps = append(ps, p)
	}
	return ps
}

// add owns t, its state gauges set; publish makes it visible to Assigned.
func (a *assignment) add(t *task) {
	a.tasks[t.partition] = t
	if t.store != nil {
		a.updateStateGauges(t)
	}
}

// remove drops partition p's task and its gauges, and reports whether it
// was owned.
func (a *assignment) remove(p int32) bool {
	t, ok := a.tasks[p]
	if !ok {
		return false
	}
	delete(a.tasks, p)
	a.publish()
	part := strconv.FormatInt(int64(p), 10)
	if t.store != nil {
		a.sh.m.stateKeys.DeleteLabelValues(a.sh.name, part)
		a.sh.m.stateBytes.DeleteLabelValues(a.sh.name, part)
	}
	a.sh.m.deleteLag(a.sh.name, a.sh.cfg.Input, part)
	return true
}

// publish makes the owned partitions visible to Assigned.
func (a *assignment) publish() {
	ps := a.partitions()
	a.assigned.Store(&ps)
}

// published is a copy of the partitions last published. Safe for
// concurrent use.
func (a *assignment) published() []int32 {
	if p := a.assigned.Load(); p != nil {
		return append([]int32(nil), (*p)...)
	}
	return nil
}

func (a *assignment) updateStateGauges(t *task) {
	part := strconv.FormatInt(int64(t.partition), 10)
	a.sh.m.stateKeys.WithLabelValues(a.sh.name, part).Set(float64(t.store.Len()))
	a.sh.m.stateBytes.WithLabelValues(a.sh.name, part).Set(float64(t.store.Bytes()))
}

// writeChangelogs produces into x one changelog record per key the open
// transaction wrote, in the transaction's arena.
func (a *assignment) writeChangelogs(x *txn) {
	now := time.Now() // one timestamp for the changelog records
	for _, t := range a.tasks {
		if t.store == nil {
			continue
		}
		t.store.eachDirty(func(k string, e entry, deleted bool) {
			x.changelog(t.partition, k, e, deleted, now)
		})
	}
}

// settle applies the ended transaction's store writes (committed) or
// discards them.
func (a *assignment) settle(committed bool) {
	for _, t := range a.tasks {
		if t.store == nil {
			continue
		}
		if committed {
			t.store.commit()
			a.updateStateGauges(t)
		} else {
			t.store.abort()
		}
	}
}

// checkMembership asks the group coordinator whether this member and
// generation are still current (a Heartbeat), so a zombie — expired from
// the group without having noticed — cannot commit a transaction that
// carries punctuation output but no input offsets. Any error, including a
// rebalance in progress, means "do not commit".
func (a *assignment) checkMembership(ctx context.Context) error {
	cl := a.sh.client()
	member, gen := cl.GroupMetadata()
	if member == "" || gen < 0 {
		return errors.New("not in the group")
	}
	req := kmsg.NewPtrHeartbeatRequest()
	req.Group = a.sh.cfg.Group
	req.MemberID = member
	req.Generation = gen
	hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := req.RequestWith(hctx, cl)
	if err != nil {
		return err
	}
	return kerr.ErrorForCode(resp.ErrorCode)
}
