package streams

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The records of one poll share an output timestamp for stampEvery
// records; a new poll reads the clock again.
func TestTxnPollStamps(t *testing.T) {
	r := partsRuntime(t, nil)
	x := &r.txn
	x.newPoll()
	first := x.pollStamp()
	for i := 1; i < stampEvery; i++ {
		if got := x.pollStamp(); !got.Equal(first) {
			t.Fatalf("record %d of the poll stamped %v, want the poll's %v", i, got, first)
		}
	}
	time.Sleep(time.Millisecond)
	if x.pollStamp().Equal(first) {
		t.Fatalf("record %d shares the first stamp", stampEvery)
	}
	x.newPoll()
	time.Sleep(time.Millisecond)
	if x.pollStamp().Equal(first) {
		t.Fatal("a new poll kept the old stamp")
	}
}

// A transaction is due with content and CommitRecords input records, a
// catch-up run, or CommitInterval after its first content; never closed
// or empty.
func TestTxnDue(t *testing.T) {
	r := partsRuntime(t, func(c *Config) { c.CommitRecords, c.CommitInterval = 3, 15*time.Second })
	x := &r.txn
	x.open = true
	if x.due() {
		t.Fatal("an empty transaction is due")
	}
	x.markContent()
	x.counts.in = 2
	if x.due() {
		t.Fatal("due below CommitRecords and CommitInterval")
	}
	x.counts.in = 3
	if !x.due() {
		t.Fatal("not due at CommitRecords")
	}
	x.counts.in = 0
	x.holdCatchUp()
	if !x.due() {
		t.Fatal("a catch-up run is not due at once")
	}
	x.catchUp = false
	x.start = time.Now().Add(-15 * time.Second)
	if !x.due() {
		t.Fatal("not due CommitInterval after its first content")
	}
	x.open = false
	if x.due() {
		t.Fatal("a closed transaction is due")
	}
}

// finish hands a committed transaction's counts to the metrics, counts an
// abort that held work (cause rebalance by default) and none that did not,
// and starts the next transaction from zero.
func TestTxnFinishCounts(t *testing.T) {
	r := partsRuntime(t, nil)
	x := &r.txn
	x.open = true
	x.markContent()
	x.counts.in = 5
	x.counts.out.add("out")
	x.counts.out.add("dlq")
	x.counts.out.add("out")
	x.counts.dlq["decode"] = 1
	x.counts.punct["close"] = 2
	if ok, err := x.finish(true, true, "", nil); !ok || err != nil {
		t.Fatalf("finish committed = %v, %v", ok, err)
	}
	m := r.m
	for name, got := range map[string]float64{
		"records_in": value(t, x.recordsIn), "out": value(t, m.recordsOut.WithLabelValues("parts", "out")),
		"dlq": value(t, m.dlq.WithLabelValues("parts", "decode")), "punct": value(t, m.punctuations.WithLabelValues("parts", "close")),
		"commits": value(t, m.txnCommits.WithLabelValues("parts")),
	} {
		if want := map[string]float64{"records_in": 5, "out": 2, "dlq": 1, "punct": 2, "commits": 1}[name]; got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if x.isOpen() || x.hasContent() || x.counts.in != 0 || len(x.counts.out) != 0 || len(x.counts.dlq) != 0 || x.sequence() != 1 {
		t.Fatalf("after finish: open %v content %v counts %+v seq %d; want a fresh transaction 1", x.open, x.content, x.counts, x.seq)
	}

	x.open = true
	x.counts.in = 4
	if ok, err := x.finish(false, false, "", nil); ok || err != nil {
		t.Fatalf("finish of an empty abort = %v, %v", ok, err)
	}
	if n := value(t, m.txnAborts.WithLabelValues("parts", "rebalance")); n != 0 {
		t.Fatalf("an abort without work counted: %v", n)
	}
	x.open = true
	x.markContent()
	if _, err := x.finish(false, false, "", nil); err != nil {
		t.Fatal(err)
	}
	if got := value(t, m.txnAborts.WithLabelValues("parts", "rebalance")); got != 1 {
		t.Fatalf("txn_aborts{rebalance} = %v, want 1", got)
	}
	x.open = true
	end := errors.New("fenced")
	if _, err := x.finish(false, true, "", end); !errors.Is(err, end) {
		t.Fatalf("finish with End's error = %v, want a TxnError wrapping it", err)
	}
}

// A due transaction with content polls nothing, even when it fell due just
// now (no time left to wait): it commits first, so it never takes more
// input than CommitRecords or holds a catch-up run open.
func TestTxnPollWhenDuePollsNothing(t *testing.T) {
	r := partsRuntime(t, func(c *Config) { c.CommitInterval = time.Second })
	x := &r.txn
	x.open = true
	x.markContent()
	x.start = time.Now().Add(-time.Second)
	if fs := x.poll(context.Background(), 0); fs != nil {
		t.Fatalf("a due transaction polled: %v", fs)
	}
}

// Only a transaction with punctuation output and no input asks the group
// for this member's generation: one without output needs no check (and a
// failing check must not abort it), one with input is checked by the
// broker on TxnOffsetCommit.
func TestTxnMembershipCheckedForPunctuationOutputOnly(t *testing.T) {
	r := partsRuntime(t, nil)
	x := &r.txn
	x.open = true
	asked := 0
	notMember := func(context.Context) error { asked++; return errors.New("not a member") }
	if cause := x.prepareCommit(context.Background(), notMember); cause != "" || asked != 0 {
		t.Fatalf("without output: cause %q after %d membership checks, want \"\" after 0", cause, asked)
	}
	x.counts.out.add("out")
	if cause := x.prepareCommit(context.Background(), notMember); cause != "membership" || asked != 1 {
		t.Fatalf("punctuation output: cause %q after %d checks, want membership after 1", cause, asked)
	}
	x.counts.in = 1
	if cause := x.prepareCommit(context.Background(), notMember); cause != "" || asked != 1 {
		t.Fatalf("with input: cause %q after %d checks, want \"\" after 1", cause, asked)
	}
}
