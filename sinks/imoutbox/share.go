package imoutbox

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// share splits the IM capacity among publish-im replicas by the partitions
// of the room events topic their fast paths own, so that what they send
// together stays within the configured limits by construction, however
// many replicas run:
//
//   - the app budget: each replica paces at im.max_calls_per_second ×
//     owned / total partitions (the fast path and the scan of a replica
//     share its pacer). A replica lowers its rate as soon as it gives
//     partitions up, after draining their work, and raises it one pacing
//     window after it gains some (tencentim.Pacer.SetAppRate), so the
//     rates in force at any instant add up to at most the share, revoke
//     and assignment included.
//   - the group limit: records are keyed by room_id, so a room's fast path
//     sends come from the one replica owning its partition, paced per group
//     by that replica's pacer. The compensation scan, which can claim any
//     row, only claims the rows of rooms whose partition this replica has
//     owned for at least a pacing window (the partition of room_id under
//     Kafka's default murmur2 key hash, as the relay produces them), so a
//     room's sends never come from two replicas' pacers at once.
//
// A replica that owns no partition sends nothing: before its first
// assignment, when it has lost its group membership, or when there are more
// replicas than partitions. The exception is the scan fallback (see
// scanFallback): a replica out of its group for im.scan_fallback_after that
// holds the MySQL fallback lock claims every room at the full share, so
// room_outbox alone still reaches IM when Kafka is unreachable (IM-12).
type share struct {
	calls   float64       // im.max_calls_per_second: roomflow's share of the app limit
	settle  time.Duration // how long a gained partition is owned before the scan takes its rooms
	setRate func(float64) // the IM client's SetCallRate
	part    kgo.TopicPartitioner
	now     func() time.Time

	mu      sync.Mutex
	total   int                 // partitions of the room events topic, 0 before the first assignment
	owned   map[int32]time.Time // partition -> owned since
	changed chan struct{}       // closed (and replaced) when the scan's scope shrinks
	// member is true while the fast path is in a group session (an
	// assignment, even an empty one, since the last loss); detachedSince is
	// when it last stopped being one (or the start).
	member        bool
	detachedSince time.Time
	// fallback: this replica holds the fallback lock and, still out of its
	// group, claims every room at the full share (enterFallback).
	fallback bool
}

func newShare(calls int, settle time.Duration, setRate func(float64)) *share {
	s := &share{calls: float64(calls), settle: settle, setRate: setRate,
		part: kgo.StickyKeyPartitioner(nil).ForTopic(""), now: time.Now,
		owned: map[int32]time.Time{}, changed: make(chan struct{})}
	s.detachedSince = s.now()
	s.setRate(0)
	return s
}

// assign adds partitions gained (none: a session without partitions of
// ours); total is the topic's partition count, 0 when unknown. A group
// session ends the fallback at once: the group's members' scans cover
// every room again.
func (s *share) assign(ps []int32, total int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.member = true
	if s.fallback {
		s.fallback = false
		s.shrunk()
	}
	if total > 0 {
		s.total = total
	}
	now := s.now()
	for _, p := range ps {
		if _, ok := s.owned[p]; !ok {
			s.owned[p] = now
		}
	}
	s.apply()
}

// revoke removes partitions given up (revoked or lost), and ends the
// contexts of scan rounds claimed under the old ownership.
func (s *share) revoke(ps []int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range ps {
		delete(s.owned, p)
	}
	s.apply()
	s.shrunk()
}

// lost is revoke for partitions the group took away (onLost: the session
// ended in error, e.g. Kafka unreachable for a session timeout): the fast
// path is out of its group from now on, until the next assignment.
func (s *share) lost(ps []int32) {
	s.revoke(ps)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.member {
		s.member, s.detachedSince = false, s.now()
	}
}

// shrunk ends the scan rounds claimed under the old scope; s.mu is held.
func (s *share) shrunk() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// detachedFor is how long the fast path has been out of its group (no
// session, so no partition), 0 while it is in one.
func (s *share) detachedFor() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.member {
		return 0
	}
	return s.now().Sub(s.detachedSince)
}

// enterFallback makes the scan claim every room at the full share (the
// raise applies a pacing window later, see tencentim.Pacer.SetAppRate),
// unless the fast path has been out of its group for less than after. It
// reports whether the fallback is on.
func (s *share) enterFallback(after time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.member || s.now().Sub(s.detachedSince) < after {
		return false
	}
	s.fallback = true
	s.apply()
	return true
}

// leaveFallback ends the fallback: the rate drops at once to what owned
// partitions give (nothing, still out of the group) and the scan rounds
// claiming every room end.
func (s *share) leaveFallback() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.fallback {
		return
	}
	s.fallback = false
	s.apply()
	s.shrunk()
}

// inFallback reports whether the fallback is on.
func (s *share) inFallback() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fallback
}

// apply sets the rate for the current ownership; s.mu is held.
func (s *share) apply() { s.setRate(s.budget()) }

// budget is the rate the current ownership (or the fallback) gives; s.mu
// is held.
func (s *share) budget() float64 {
	switch {
	case s.fallback:
		return s.calls
	case s.total == 0:
		return 0
	}
	return s.calls * float64(len(s.owned)) / float64(s.total)
}

// rate is the budget the current ownership gives (tests, logs).
func (s *share) rate() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.budget()
}

// scope is what the compensation scan may claim now: keep reports whether
// a room's partition has been owned for at least settle, and spread is
// total / settled partitions (rounded up), how many candidates to read per
// row wanted. keep is nil when no partition is settled: the scan claims
// nothing. In the fallback keep takes every room.
func (s *share) scope() (keep func(room string) bool, spread int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fallback {
		return func(string) bool { return true }, 1
	}
	if s.total == 0 {
		return nil, 0
	}
	cutoff := s.now().Add(-s.settle)
	settled := map[int32]bool{}
	for p, since := range s.owned {
		if !since.After(cutoff) {
			settled[p] = true
		}
	}
	if len(settled) == 0 {
		return nil, 0
	}
	total, part := s.total, s.part
	keep = func(room string) bool {
		return settled[int32(part.Partition(&kgo.Record{Key: []byte(room)}, total))]
	}
	return keep, (total + len(settled) - 1) / len(settled)
}

// roundContext is ctx ended also when partitions are next given up or the
// fallback ends: a scan round then stops claiming and sending (its unsent
// rows are released) so it never sends a room another replica now owns.
func (s *share) roundContext(ctx context.Context) (context.Context, context.CancelFunc) {
	s.mu.Lock()
	changed := s.changed
	s.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-changed:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}
