package streams

import (
	"slices"
	"testing"
)

// Group events wait in order until the loop takes them; empty ones are
// not queued.
func TestAssignmentQueuesEvents(t *testing.T) {
	r := partsRuntime(t, nil)
	a := &r.group
	a.push(evAssigned, nil)
	if a.eventsPending() {
		t.Fatal("an empty event is pending")
	}
	ps := []int32{1, 2}
	a.push(evAssigned, ps)
	a.push(evRevoked, []int32{2})
	ps[0] = 9 // the queue keeps its own copy
	if !a.eventsPending() {
		t.Fatal("no event pending")
	}
	ev := a.takeEvents()
	if len(ev) != 2 || ev[0].kind != evAssigned || !slices.Equal(ev[0].partitions, []int32{1, 2}) || ev[1].kind != evRevoked {
		t.Fatalf("events %+v, want assigned [1 2] then revoked [2]", ev)
	}
	if a.eventsPending() || a.takeEvents() != nil {
		t.Fatal("events left after take")
	}
}

// Owned tasks show in Assigned once published and their state gauges
// follow commits; an abort discards the writes; removing a task drops its
// gauges, and removing an unowned partition does nothing.
func TestAssignmentOwnsTasksAndStores(t *testing.T) {
	r := partsRuntime(t, nil)
	a := &r.group
	tk := partsTask(r, 4)
	a.add(tk)
	if len(r.Assigned()) != 0 {
		t.Fatal("published before publish")
	}
	a.publish()
	got := r.Assigned()
	if !slices.Equal(got, []int32{4}) || a.task(4) != tk {
		t.Fatalf("assigned %v, want [4]", got)
	}
	got[0] = 7 // a copy
	keys := r.m.stateKeys.WithLabelValues("parts", "4")

	tk.store.Put("a", []byte("1"))
	a.settle(true)
	if v, ok := tk.store.Get("a"); !ok || string(v) != "1" || value(t, keys) != 1 {
		t.Fatalf("after commit: a=%q %v, state_keys %v", v, ok, value(t, keys))
	}
	tk.store.Put("b", []byte("2"))
	a.settle(false)
	if _, ok := tk.store.Get("b"); ok || value(t, keys) != 1 {
		t.Fatal("an aborted write stayed")
	}

	if a.remove(5) {
		t.Fatal("removed an unowned partition")
	}
	if !a.remove(4) || a.task(4) != nil || len(r.Assigned()) != 0 {
		t.Fatalf("after remove: task %v assigned %v", a.task(4), r.Assigned())
	}
	if n := series(r.m.stateKeys); n != 0 {
		t.Fatalf("%d state_keys series after remove, want none", n)
	}
}
