package streams_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/processors/streams"
	"github.com/hyapp/roomflow/processors/streams/rttest"
)

// TestRestoreWaitsOutChangelogStall: 30 keys are counted to 20; while a
// second instance restores, every fetch of the changelog answers
// NOT_LEADER_FOR_PARTITION for 12 s (its leader moving in a rolling broker
// restart; kgo retries that silently, so the restore sees only silence).
// The restore must wait it out — not ready, the restoring gauge at 3,
// nothing read — and then every key must continue from 20, not from 1.
func TestRestoreWaitsOutChangelogStall(t *testing.T) {
	h := newHarness(t, 3)
	if h.k.Fake == nil {
		t.Skip("needs kfake faults to stall the changelog fetches; ROOMFLOW_KAFKA_BROKERS is set")
	}
	oracle := h.inputs(600, 30, 0)
	a := rttest.Start(h.runtime("stall-a", counter{out: h.out}))
	rttest.ReadCommitted(t, h.k.Brokers, h.out, 600, 0, 30*time.Second)
	a.Stop(t)

	stalled := h.k.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: h.cl, Err: kerr.NotLeaderForPartition, Count: -1})
	reg := prometheus.NewRegistry()
	bRT := h.runtime("stall-b", counter{out: h.out}, withRegisterer(reg))
	b := rttest.Start(bRT)
	testenv.Eventually(t, 30*time.Second, "the restore to fetch the changelog", func() bool { return stalled.Hits() > 0 })
	stallStart := time.Now()
	restoring := func(when string) {
		t.Helper()
		if err := bRT.Ready(); err == nil || !strings.Contains(err.Error(), "restoring 3 partitions") {
			t.Fatalf("%s: Ready() = %v, want not ready while restoring 3 partitions", when, err)
		}
		if n, _ := testenv.Metric(reg, "roomflow_process_restoring_partitions"); n != 3 {
			t.Fatalf("%s: restoring_partitions %v, want 3", when, n)
		}
		if n, _ := testenv.Metric(reg, "roomflow_process_restore_records_total"); n != 0 {
			t.Fatalf("%s: restore_records_total %v, want 0: nothing can be read", when, n)
		}
		if got := bRT.Assigned(); len(got) != 0 {
			t.Fatalf("%s: partitions %v running before their restore ended", when, got)
		}
	}
	restoring("as the stall begins")
	// The stall is the broker event under test, so it lasts 12 s of real
	// time (longer than the quiet period the old restore trusted).
	time.Sleep(12*time.Second - time.Since(stallStart))
	restoring("after 12 s of stall")
	stalled.Remove()

	testenv.Eventually(t, 60*time.Second, "the restore to end after the stall", func() bool {
		return len(bRT.Assigned()) == 3 && bRT.Ready() == nil
	})
	for k, v := range h.inputs(30, 30, 600) {
		oracle[k] = append(oracle[k], v...)
	}
	out := rttest.ReadCommitted(t, h.k.Brokers, h.out, 630, 500*time.Millisecond, 30*time.Second)
	b.Stop(t)
	checkCounts(t, out, oracle)
	if n, _ := testenv.Metric(reg, "roomflow_process_restoring_partitions"); n != 0 {
		t.Fatalf("restoring_partitions %v after the restore, want 0", n)
	}
	if n, _ := testenv.Metric(reg, "roomflow_process_restore_records_total"); n < 60 {
		t.Fatalf("restore_records_total %v, want at least one record per key (60 keys)", n)
	}
}

// sessions is a toy processor with a timer: value "open" opens the session
// named by the key (state "open:<key>"); the punctuation closes every open
// session once (deletes "open:", writes "closed:<key>=<who>") and emits a
// close record; "dump" dumps the store.
type sessions struct{ out, dump, who string }

func (s sessions) Process(t streams.Task, rec *kgo.Record) error {
	switch string(rec.Value) {
	case "open":
		t.Store().Put("open:"+string(rec.Key), []byte("1"))
	case "dump":
		dumpStore(t, s.dump)
	}
	return nil
}

func (s sessions) closeAll(t streams.Task, _ time.Time) error {
	var open []string
	t.Store().Range(func(k string, _ []byte) bool {
		if id, ok := strings.CutPrefix(k, "open:"); ok {
			open = append(open, id)
		}
		return true
	})
	for _, id := range open {
		t.Store().Delete("open:" + id)
		t.Store().Put("closed:"+id, []byte(s.who))
		t.Emit(&kgo.Record{Topic: s.out, Key: []byte(id), Value: []byte(s.who)})
	}
	return nil
}

// TestPausedTimerCommitAfterTakeoverClosesOnce: instance A's punctuation
// closes a session and passes its membership check; then A's EndTxn is
// held at the broker (A paused before its commit arrives) and its
// heartbeats stop counting, so the group gives the partition to B. The
// punctuation-only transaction carries no offsets, so nothing fences it:
// once released it commits. B must not close the session again: its
// restore waits until A's transaction is resolved and sees A's close. The
// session is closed exactly once, and B's state agrees with the output.
func TestPausedTimerCommitAfterTakeoverClosesOnce(t *testing.T) {
	h := newHarness(t, 1)
	if h.k.Fake == nil {
		t.Skip("needs kfake request control to hold an EndTxn; ROOMFLOW_KAFKA_BROKERS is set")
	}
	clock := rttest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	start := func(who string, reg *prometheus.Registry) (*streams.Runtime, *rttest.Running) {
		p := sessions{out: h.out, dump: h.dump, who: who}
		// A transaction timeout far above the takeover: the broker must not
		// abort A's held transaction itself (a slow machine once took 20 s
		// to move the partition, and the 30 s default aborted it, so B's
		// restore rightly found nothing open).
		rt := h.runtime("close-"+who, p, withTimer(clock.Now, "close", time.Minute, p.closeAll),
			withRegisterer(reg), withClientID("close-"+who+"-client"),
			func(c *streams.Config) { c.TransactionTimeout = 3 * time.Minute })
		return rt, rttest.Start(rt)
	}
	rttest.Produce(t, h.k.Client(t), []*kgo.Record{{Topic: h.in, Key: []byte("s1"), Value: []byte("open")}})
	regA := prometheus.NewRegistry()
	aRT, a := start("a", regA)
	testenv.Eventually(t, 30*time.Second, "A to commit the open session", func() bool {
		n, _ := testenv.Metric(regA, "roomflow_process_records_in_total")
		return n == 1 && len(aRT.Assigned()) == 1
	})

	held, release := make(chan struct{}), make(chan struct{})
	var heldOnce sync.Once
	h.k.Fake.ControlKey(int16(kmsg.EndTxn), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.EndTxnRequest)
		if req.TransactionalID != "close-a" || !req.Commit {
			return nil, nil, false
		}
		// The control stays installed while it sleeps: kgo's retry of the
		// held EndTxn (its request timed out) runs it again and is held too.
		h.k.Fake.DropControl()
		heldOnce.Do(func() { close(held) })
		h.k.Fake.SleepControl(func() { <-release })
		return nil, nil, false // then the broker commits it as usual
	})
	clock.Advance(time.Minute) // A's punctuation closes s1
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("A never tried to commit its punctuation")
	}
	h.dropHeartbeats("close-a-client")

	regB := prometheus.NewRegistry()
	bRT, b := start("b", regB)
	// B restores as soon as the group gives it the partition. Fixed, it
	// cannot finish while A's transaction is open; the old restore did
	// finish, without A's close, and B's timer then closed s1 again.
	waited := false
	testenv.Eventually(t, 60*time.Second, "B to be given the partition", func() bool {
		n, _ := testenv.Metric(regB, "roomflow_process_restoring_partitions")
		waited = n > 0
		return waited || len(bRT.Assigned()) == 1
	})
	if !waited {
		clock.Advance(time.Minute)
		testenv.Eventually(t, 30*time.Second, "B's timer", func() bool {
			n, _ := testenv.Metric(regB, "roomflow_process_punctuations_total")
			return n > 0
		})
	}
	if waited {
		// However long A's transaction stays open, B keeps restoring.
		time.Sleep(2 * time.Second)
		if err := bRT.Ready(); err == nil || len(bRT.Assigned()) != 0 {
			t.Fatalf("B ended its restore while A's transaction was open (Ready %v)", err)
		}
	}
	t.Logf("B's restore waited for A's open transaction: %v", waited)
	close(release)
	testenv.Eventually(t, 60*time.Second, "B to own the partition", func() bool { return len(bRT.Assigned()) == 1 })
	clock.Advance(time.Minute) // B's timer runs at least once on the restored state
	testenv.Eventually(t, 30*time.Second, "B's timer", func() bool {
		n, _ := testenv.Metric(regB, "roomflow_process_punctuations_total")
		return n > 0
	})
	closes := rttest.ReadCommitted(t, h.k.Brokers, h.out, 1, 2*time.Second, 30*time.Second)
	var by []string
	for _, r := range closes {
		by = append(by, string(r.Key)+" by "+string(r.Value))
	}
	if len(closes) != 1 {
		t.Fatalf("session closed %d times (%v), want exactly once", len(closes), by)
	}
	if got, want := h.dumps(1, 1)["0"], "closed:s1="+string(closes[0].Value); got != want {
		t.Fatalf("B's state %q, want %q (what was committed)", got, want)
	}
	a.Cancel()
	select {
	case err := <-a.Done:
		t.Logf("paused A returned %v; the close was committed %s", err, by[0])
	case <-time.After(30 * time.Second):
		t.Fatal("A did not stop")
	}
	b.Stop(t)
}

// TestDeletedKeyStaysDeletedAfterRestore: keys deleted and committed stay
// deleted after a restart restores the changelog (a changelog without the
// deletes' tombstones would bring them back), and count again from 1.
func TestDeletedKeyStaysDeletedAfterRestore(t *testing.T) {
	h := newHarness(t, 3)
	toy := counter{out: h.out, dump: h.dump}
	h.inputs(60, 30, 0) // k0..k29 counted to 2
	a := rttest.Start(h.runtime("del-a", toy))
	rttest.ReadCommitted(t, h.k.Brokers, h.out, 60, 0, 30*time.Second)
	// The keys are committed; now delete k0..k9 in later transactions
	// (the dumps come after the deletes in each partition).
	var deletes []*kgo.Record
	for i := range 10 {
		deletes = append(deletes, &kgo.Record{Topic: h.in, Key: []byte("k" + strconv.Itoa(i)), Value: []byte("delete")})
	}
	rttest.Produce(t, h.k.Client(t), deletes)
	before := h.dumps(3, 3)
	a.Stop(t)
	var entries []string
	for _, st := range before {
		entries = append(entries, strings.Split(st, ";")...)
	}
	for i := range 30 {
		k := "k" + strconv.Itoa(i)
		if has := slices.Contains(entries, k+"=2"); has != (i >= 10) {
			t.Fatalf("before the restart: %s present %v, want only k10..k29: %v", k, has, entries)
		}
	}

	b := rttest.Start(h.runtime("del-b", toy))
	after := h.dumps(3, 6)
	for p, st := range before {
		if after[p] != st {
			t.Fatalf("partition %s state after restore differs:\nbefore %s\nafter  %s", p, st, after[p])
		}
	}
	h.inputs(30, 30, 60)
	out := rttest.ReadCommitted(t, h.k.Brokers, h.out, 90, 500*time.Millisecond, 30*time.Second)
	b.Stop(t)
	last := map[string]string{}
	for _, r := range out {
		last[string(r.Key)] = strings.Split(string(r.Value), "|")[1]
	}
	for i := range 30 {
		want := "3"
		if i < 10 {
			want = "1"
		}
		if k := "k" + strconv.Itoa(i); last[k] != want {
			t.Fatalf("%s counted to %s after the restart, want %s", k, last[k], want)
		}
	}
}

// TestRestoreStopsOnCancelAndKill: a restore that cannot read its marker
// back (every changelog fetch fails) waits without limit, yet Run still
// returns nil at once on cancel and ErrKilled after Kill.
func TestRestoreStopsOnCancelAndKill(t *testing.T) {
	h := newHarness(t, 1)
	if h.k.Fake == nil {
		t.Skip("needs kfake faults to stall the changelog fetches; ROOMFLOW_KAFKA_BROKERS is set")
	}
	h.k.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: h.cl, Err: kerr.NotLeaderForPartition, Count: -1})
	for _, kill := range []bool{false, true} {
		rt := h.runtime("stuck", counter{out: h.out})
		r := rttest.Start(rt)
		testenv.Eventually(t, 30*time.Second, "the restore", func() bool {
			err := rt.Ready()
			return err != nil && strings.Contains(err.Error(), "restoring 1 partitions")
		})
		if !kill {
			r.Stop(t) // fails unless Run returns nil
			continue
		}
		rt.Kill()
		select {
		case err := <-r.Done:
			if !errors.Is(err, streams.ErrKilled) {
				t.Fatalf("Run after Kill during restore = %v, want ErrKilled", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("Run did not return after Kill during restore")
		}
		r.Cancel()
	}
}

// TestRestoreMarkerFencedIsFatal: when another instance takes over the
// transactional id while the marker is being produced (InitProducerID
// bumps the epoch: the instance is fenced), Run stops with a *TxnError
// instead of restoring.
func TestRestoreMarkerFencedIsFatal(t *testing.T) {
	h := newHarness(t, 1)
	if h.k.Fake == nil {
		t.Skip("needs kfake request control to fence the marker's produce; ROOMFLOW_KAFKA_BROKERS is set")
	}
	other := h.k.Client(t)
	h.k.Fake.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.ProduceRequest)
		if req.TransactionID == nil || *req.TransactionID != "fenced" {
			return nil, nil, false // its first produce is the marker
		}
		h.k.Fake.DropControl()
		fenced := make(chan struct{})
		go func() { // a new instance with the same transactional id
			defer close(fenced)
			init := kmsg.NewPtrInitProducerIDRequest()
			id := "fenced"
			init.TransactionalID, init.TransactionTimeoutMillis = &id, 30000
			resp, err := init.RequestWith(context.Background(), other)
			if err == nil {
				err = kerr.ErrorForCode(resp.ErrorCode)
			}
			if err != nil {
				t.Errorf("InitProducerID of the new instance: %v", err)
			}
		}()
		h.k.Fake.SleepControl(func() { <-fenced })
		return nil, nil, false // now the broker answers the stale epoch
	})
	r := rttest.Start(h.runtime("fenced", counter{out: h.out}))
	defer r.Cancel()
	select {
	case err := <-r.Done:
		var te *streams.TxnError
		if !errors.As(err, &te) || !strings.Contains(err.Error(), "restore marker") {
			t.Fatalf("Run = %v, want a *TxnError for the restore marker", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not stop after its marker was fenced")
	}
}
