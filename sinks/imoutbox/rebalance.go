package imoutbox

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The fast path's side of its consumer group's rebalances: what it does
// when partitions are assigned, revoked and lost.

// onRevoked drops the held records of the revoked partitions (never
// claimed, so the next owner holds and delivers them), drains the work in
// flight (bounded by DrainTimeout), so the next owner of a partition starts
// after our last recorded event, commits the marked offsets, and only then
// gives up the partitions' share of the IM capacity (the next owner gets it
// after this returns).
func (f *FastPath) onRevoked(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
	f.claiming.Lock()
	f.dropHeld(revoked)
	f.claiming.Unlock()
	f.drain(f.svc.cfg.DrainTimeout)
	cctx, cancel := context.WithTimeout(ctx, f.svc.cfg.DrainTimeout)
	defer cancel()
	if err := cl.CommitMarkedOffsets(cctx); err != nil {
		f.svc.m.batchErrors.WithLabelValues("commit").Inc()
		f.svc.log.Warn("offset commit on revoke failed; events will be seen again and skipped as delivered", "error", err.Error())
	}
	f.giveUp(revoked)
}

// onLost gives up the share of partitions the group took away without a
// revoke: another replica may own them already. kgo calls it when the
// group session ends in error, after every failed join too, e.g. when the
// brokers have been unreachable for a session timeout (the heartbeat
// request is retried for that long): the fast path is then out of its
// group, which starts the scan fallback's clock (see scanFallback).
func (f *FastPath) onLost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	if f.share == nil {
		return
	}
	if ps := lost[f.topic]; len(ps) > 0 {
		f.logGiveUp(ps)
	}
	f.share.lost(lost[f.topic])
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
	deadline := time.Now().Add(timeout)
	stop := time.AfterFunc(timeout, func() { f.mu.Lock(); f.idle.Broadcast(); f.mu.Unlock() })
	defer stop.Stop()
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.queue) > 0 {
		if time.Now().After(deadline) {
			return false
		}
		f.idle.Wait()
	}
	return true
}
