package streams

import (
	"bytes"
	"fmt"
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Buffers handed out within one transaction never overlap, whatever their
// sizes, and a value appended past its room is still complete.
func TestArenaBuffersDoNotOverlap(t *testing.T) {
	a := newTxnArena()
	var got [][]byte
	var want []string
	for i := 0; i < 5000; i++ {
		v := fmt.Sprintf("value-%d-%s", i, bytes.Repeat([]byte{'x'}, i%700))
		hint := len(v)
		if i%3 == 0 {
			hint = 1 // outgrows its room: falls back to the heap
		}
		b := a.bytes.Append(hint, func(b []byte) []byte { return append(b, v...) })
		if cap(b) != len(b) {
			t.Fatalf("buffer %d: cap %d != len %d", i, cap(b), len(b))
		}
		got = append(got, b)
		want = append(want, v)
		s := "k" + strconv.Itoa(i)
		got = append(got, a.bytes.copyString(s))
		want = append(want, s)
	}
	for i := range got {
		if string(got[i]) != want[i] {
			t.Fatalf("buffer %d = %q, want %q", i, got[i], want[i])
		}
	}
	large := a.bytes.Append(1<<20, func(b []byte) []byte { return append(b, "big"...) })
	if string(large) != "big" {
		t.Fatalf("large buffer = %q", large)
	}
}

// After a reset, records and headers come back zeroed, and chunks the last
// transaction did not use are freed.
func TestArenaResetZeroesAndShrinks(t *testing.T) {
	a := newTxnArena()
	for i := 0; i < 1000; i++ {
		r := &a.recs.take(1)[0]
		if r.Topic != "" || r.Key != nil || r.Headers != nil || r.Partition != 0 {
			t.Fatalf("record %d not zeroed: %+v", i, r)
		}
		r.Topic, r.Key, r.Partition = "t", []byte("k"), 7
		r.Headers = a.hdrs.take(4)
		r.Headers[0] = kgo.RecordHeader{Key: "h", Value: []byte("v")}
		_ = a.bytes.Append(1000, func(b []byte) []byte { return append(b, make([]byte, 1000)...) })
	}
	if n := len(a.recs.chunks); n != 4 {
		t.Fatalf("record chunks after 1000 records = %d, want 4", n)
	}
	a.reset()
	if len(a.recs.chunks) != 4 || len(a.bytes.chunks) < 10 {
		t.Fatalf("reset after a large transaction freed chunks it used: %d record, %d byte chunks", len(a.recs.chunks), len(a.bytes.chunks))
	}
	for i := 0; i < 300; i++ {
		r := &a.recs.take(1)[0]
		if r.Topic != "" || r.Key != nil || r.Headers != nil || r.Partition != 0 {
			t.Fatalf("record %d not zeroed after reset: %+v", i, r)
		}
		h := a.hdrs.take(4)
		for _, x := range h {
			if x.Key != "" || x.Value != nil {
				t.Fatalf("header not zeroed after reset: %+v", x)
			}
		}
	}
	a.reset()
	if n := len(a.recs.chunks); n != 2 {
		t.Fatalf("record chunks after a 300-record transaction = %d, want 2", n)
	}
	if n := len(a.bytes.chunks); n != 1 {
		t.Fatalf("byte chunks after a transaction without bytes = %d, want 1", n)
	}
	big := a.hdrs.take(10_000)
	if len(big) != 10_000 {
		t.Fatalf("large header run len %d", len(big))
	}
}

// Building a value through the Task interface costs no allocation: the
// closure handed to Bytes().Append stays on the caller's stack. (Through an
// interface method taking the closure it escaped: one allocation per
// emitted key or value, ~5% of the mic processor's CPU.)
func TestTaskBytesAppendDoesNotAllocate(t *testing.T) {
	var tk Task = &task{arena: newTxnArena()}
	allocs := testing.AllocsPerRun(100, func() { _ = appendUserKey(tk, 1234567) })
	if allocs != 0 {
		t.Fatalf("Task.Bytes().Append: %v allocations per call, want 0", allocs)
	}
}

// appendUserKey is a processor's emit: t is an interface value, not
// devirtualized by inlining into the test.
//
//go:noinline
func appendUserKey(t Task, userID int64) []byte {
	return t.Bytes().Append(20, func(b []byte) []byte { return strconv.AppendInt(b, userID, 10) })
}
