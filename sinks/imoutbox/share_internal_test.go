package imoutbox

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// A replica's budget is the share times owned/total partitions; the scan
// takes only the rooms of partitions owned for a whole window, reads
// total/owned candidates per row, and its round ends when partitions are
// given up.
func TestShareFollowsOwnership(t *testing.T) {
	var rate float64
	s := newShare(120, time.Second, func(r float64) { rate = r })
	clock := time.Unix(1000, 0)
	s.now = func() time.Time { return clock }
	if keep, _ := s.scope(); rate != 0 || keep != nil {
		t.Fatalf("before any assignment: rate %v, scope %v", rate, keep != nil)
	}
	s.assign([]int32{0, 1, 2}, 12)
	if rate != 30 {
		t.Fatalf("3 of 12 partitions: rate %v, want 30", rate)
	}
	if keep, _ := s.scope(); keep != nil {
		t.Fatal("the scan took rooms of partitions gained less than a window ago")
	}
	clock = clock.Add(time.Second)
	keep, spread := s.scope()
	if keep == nil || spread != 4 {
		t.Fatalf("settled: scope %v, spread %d, want 4", keep != nil, spread)
	}
	owned := 0
	for i := range 1200 {
		if keep(fmt.Sprintf("room-%d", i)) {
			owned++
		}
	}
	if owned < 200 || owned > 400 { // about 3/12 of 1200 rooms
		t.Fatalf("%d of 1200 rooms kept for 3 of 12 partitions", owned)
	}

	ctx, cancel := s.roundContext(context.Background())
	defer cancel()
	s.revoke([]int32{2})
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a scan round outlived a revoke")
	}
	if rate != 20 {
		t.Fatalf("2 of 12 partitions: rate %v, want 20", rate)
	}
	keep2, spread := s.scope()
	if spread != 6 {
		t.Fatalf("spread %d, want 6", spread)
	}
	for i := range 1200 {
		room := fmt.Sprintf("room-%d", i)
		if keep2(room) && !keep(room) {
			t.Fatalf("%s kept after a revoke but not before", room)
		}
	}
	s.revoke([]int32{0, 1})
	if keep, _ := s.scope(); rate != 0 || keep != nil {
		t.Fatalf("all given up: rate %v, scope %v", rate, keep != nil)
	}
}

// The fallback is only for a replica out of its group for a while: a
// session without partitions (more replicas than partitions) is not out
// of it. In the fallback the scan takes every room at the full share;
// the next assignment ends it at once, and ends the rounds claimed in it.
func TestShareFallback(t *testing.T) {
	var rate float64
	s := newShare(120, time.Second, func(r float64) { rate = r })
	clock := time.Unix(1000, 0)
	s.now = func() time.Time { return clock }
	if s.enterFallback(time.Minute) {
		t.Fatal("fallback at start")
	}
	clock = clock.Add(time.Minute)
	s.assign(nil, 0) // a session, no partition of ours
	clock = clock.Add(time.Hour)
	if s.detachedFor() != 0 || s.enterFallback(time.Minute) {
		t.Fatal("fallback for a member without partitions")
	}
	s.lost(nil)
	clock = clock.Add(59 * time.Second)
	if s.enterFallback(time.Minute) {
		t.Fatal("fallback before the minute out of the group")
	}
	clock = clock.Add(time.Second)
	if !s.enterFallback(time.Minute) || rate != 120 {
		t.Fatalf("fallback after a minute out of the group: rate %v", rate)
	}
	if keep, spread := s.scope(); keep == nil || !keep("any-room") || spread != 1 {
		t.Fatal("the fallback scan does not take every room")
	}
	ctx, cancel := s.roundContext(context.Background())
	defer cancel()
	s.assign([]int32{0}, 4)
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a fallback scan round outlived the assignment")
	}
	if s.inFallback() || rate != 30 {
		t.Fatalf("after an assignment: fallback %v, rate %v; want off, 30", s.inFallback(), rate)
	}
	if keep, _ := s.scope(); keep != nil {
		t.Fatal("the scan takes rooms of a partition gained less than a window ago")
	}
	s.lost([]int32{0})
	clock = clock.Add(time.Minute)
	if !s.enterFallback(time.Minute) {
		t.Fatal("no fallback a minute after the loss")
	}
	s.leaveFallback()
	if s.inFallback() || rate != 0 {
		t.Fatalf("left: fallback %v, rate %v", s.inFallback(), rate)
	}
}
