package imoutbox

import (
	"context"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The fast path's side of its consumer group's rebalances: what it does
// when partitions are assigned, revoked and lost.

// partition is the fast path's ownership of one partition of the topic,
// from its assignment until it is given up (revoked or lost): its room
// chains send under ctx, cancelled then.
type partition struct {
	ctx    context.Context
	cancel context.CancelFunc
	open   int // claimed rows of its chains without a recorded result (f.mu)
}

func (o *partition) busy() bool { return o.open > 0 }

// own starts the ownership of partitions gained; kept ones stay as they are.
func (f *FastPath) own(ps []int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range ps {
		if f.owned[p] == nil {
			ctx, cancel := context.WithCancel(context.Background())
			f.owned[p] = &partition{ctx: ctx, cancel: cancel}
		}
	}
}

// disown ends the ownership of partitions given up, which stops their room
// chains: they start no send and hand their unsent rows back, and none of
// their records is marked for commit from now on. It returns them with how
// many of their claimed rows have no result recorded yet.
func (f *FastPath) disown(ps []int32) (gone []*partition, open int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range ps {
		if o := f.owned[p]; o != nil {
			o.cancel()
			delete(f.owned, p)
			gone = append(gone, o)
			open += o.open
		}
	}
	return gone, open
}

// onRevoked drops the held records of the revoked partitions (never
// claimed, so the next owner holds and delivers them) and drains the work
// in flight (bounded by DrainTimeout), so the next owner of a partition
// starts after our last recorded event. Then it gives up the partitions'
// share of the IM capacity and their rooms in the scan (the next owner
// gets them after this returns) and stops their room chains the drain left
// running: a send in flight ends within publish_timeout and is recorded,
// the rows not sent yet are handed back, and their records stay
// uncommitted, so the next owner reads them again and sends them before
// anything newer of their rooms. It waits for that, then commits the
// marked offsets.
func (f *FastPath) onRevoked(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
	f.claiming.Lock()
	f.dropHeld(revoked)
	f.claiming.Unlock()
	f.drain(f.svc.cfg.DrainTimeout)
	f.giveUp(revoked)
	ps := revoked[f.topic]
	if gone, open := f.disown(ps); open > 0 {
		f.svc.log.Warn("revoked partitions' events not all sent within shutdown.timeout; each room's send in flight finishes, the rest go back to the next owner",
			"partitions", ps, "events", open, "shutdown_timeout", f.svc.cfg.DrainTimeout.String())
		if !f.await(f.svc.cfg.PublishTimeout+f.svc.cfg.DrainTimeout, func() bool { return !slices.ContainsFunc(gone, (*partition).busy) }) {
			f.svc.log.Warn("revoked partitions' results not all recorded in time; the next owner skips those rows until they are or their lock expires", "partitions", ps)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, f.svc.cfg.DrainTimeout)
	defer cancel()
	if err := cl.CommitMarkedOffsets(cctx); err != nil {
		f.svc.m.batchErrors.WithLabelValues("commit").Inc()
		f.svc.log.Warn("offset commit on revoke failed; events will be seen again and skipped as delivered", "error", err.Error())
	}
}

// onLost gives up partitions the group took away without a revoke:
// another replica may own them already. Their share of the IM capacity
// and their rooms in the scan go, and their room chains stop at once,
// handing their unsent rows back (a send in flight still ends and is
// recorded; waiting for it buys no order against an owner that may be
// sending already). kgo calls it when the group session ends in error,
// after every failed join too, e.g. when the brokers have been unreachable
// for a session timeout (the heartbeat request is retried for that long):
// the fast path is then out of its group, which starts the scan fallback's
// clock (see scanFallback).
func (f *FastPath) onLost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	if f.share != nil {
		if ps := lost[f.topic]; len(ps) > 0 {
			f.logGiveUp(ps)
		}
		f.share.lost(lost[f.topic])
	}
	f.disown(lost[f.topic])
}

func (f *FastPath) giveUp(ps map[string][]int32) {
	if f.share == nil || len(ps[f.topic]) == 0 {
		return
	}
	f.share.revoke(ps[f.topic])
	f.logGiveUp(ps[f.topic])
}

func (f *FastPath) logGiveUp(ps []int32) {
	f.svc.log.Info("room event partitions given up; im call budget lowered", "partitions", ps,
		"budget_per_second", f.share.rate())
}

// onAssigned takes the share of the IM capacity of the partitions gained:
// the topic's partition count comes from the cluster's metadata. kgo calls
// it at the start of every group session, with nothing gained too: the
// fast path is in its group again, which ends the scan fallback.
func (f *FastPath) onAssigned(ctx context.Context, cl *kgo.Client, assigned map[string][]int32) {
	ps := assigned[f.topic]
	f.own(ps)
	if f.share == nil {
		return
	}
	if len(ps) == 0 {
		f.share.assign(nil, 0)
		return
	}
	total := 0
	for attempt := 0; attempt < 3 && total == 0; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		td, err := kadm.NewClient(cl).ListTopics(cctx, f.topic)
		cancel()
		if err == nil {
			err = td[f.topic].Err
		}
		if err == nil {
			total = len(td[f.topic].Partitions)
		} else {
			f.svc.log.Warn("partition count of the room events topic unknown; im call budget stays as it was", "attempt", attempt+1, "error", err.Error())
		}
	}
	f.share.assign(ps, total)
	f.svc.log.Info("room event partitions assigned; im call budget raised after one pacing window", "partitions", ps,
		"topic_partitions", total, "budget_per_second", f.share.rate())
}

// drain waits until every poll handed out has its results recorded.
func (f *FastPath) drain(timeout time.Duration) bool {
	return f.await(timeout, func() bool { return len(f.queue) == 0 })
}

// await waits at most timeout until done holds (checked under f.mu, again
// whenever results are recorded) and reports whether it does.
func (f *FastPath) await(timeout time.Duration, done func() bool) bool {
	deadline := time.Now().Add(timeout)
	stop := time.AfterFunc(timeout, func() { f.mu.Lock(); f.idle.Broadcast(); f.mu.Unlock() })
	defer stop.Stop()
	f.mu.Lock()
	defer f.mu.Unlock()
	for !done() {
		if !time.Now().Before(deadline) {
			return false
		}
		f.idle.Wait()
	}
	return true
}
