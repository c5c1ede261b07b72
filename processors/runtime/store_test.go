package runtime

import (
	"bytes"
	"testing"
	"time"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func TestStoreTransactionVisibility(t *testing.T) {
	c := &fakeClock{t: time.UnixMilli(1_700_000_000_000)}
	s := newStore(c.now)
	s.Put("a", []byte("1"))
	if v, ok := s.Get("a"); !ok || string(v) != "1" {
		t.Fatalf("own write not visible: %q %v", v, ok)
	}
	if s.Len() != 0 {
		t.Fatalf("uncommitted write counted as committed")
	}
	s.abort()
	if _, ok := s.Get("a"); ok {
		t.Fatal("aborted write visible")
	}
	s.Put("a", []byte("1"))
	s.Put("b", []byte("22"))
	s.commit()
	if s.Len() != 2 || s.Bytes() != 1+1+1+2 {
		t.Fatalf("len %d bytes %d", s.Len(), s.Bytes())
	}
	s.Delete("a")
	if _, ok := s.Get("a"); ok {
		t.Fatal("pending delete not visible")
	}
	s.abort()
	if v, ok := s.Get("a"); !ok || string(v) != "1" {
		t.Fatal("aborted delete removed the committed value")
	}
	s.Delete("a")
	s.commit()
	if _, ok := s.Get("a"); ok || s.Len() != 1 || s.Bytes() != 3 {
		t.Fatalf("delete not committed: len %d bytes %d", s.Len(), s.Bytes())
	}
}

func TestStoreRejectUndoesOnlyTheRecord(t *testing.T) {
	c := &fakeClock{t: time.UnixMilli(1_700_000_000_000)}
	s := newStore(c.now)
	s.beginRecord()
	s.Put("a", []byte("first"))
	s.endRecord()
	s.beginRecord()
	s.Put("a", []byte("second"))
	s.Put("b", []byte("x"))
	s.Delete("a")
	s.rejectRecord()
	if v, ok := s.Get("a"); !ok || string(v) != "first" {
		t.Fatalf("a = %q %v, want the first record's write", v, ok)
	}
	if _, ok := s.Get("b"); ok {
		t.Fatal("rejected record's write survived")
	}
}

func TestStoreTTL(t *testing.T) {
	c := &fakeClock{t: time.UnixMilli(1_700_000_000_000)}
	s := newStore(c.now)
	s.PutTTL("k", []byte("v"), time.Minute)
	s.Put("forever", []byte("v"))
	s.commit()
	c.t = c.t.Add(59 * time.Second)
	if _, ok := s.Get("k"); !ok {
		t.Fatal("expired too early")
	}
	c.t = c.t.Add(time.Second)
	if _, ok := s.Get("k"); ok {
		t.Fatal("not expired at its deadline")
	}
	n := 0
	s.Range(func(string, []byte) bool { n++; return true })
	if n != 1 {
		t.Fatalf("Range saw %d live keys, want 1", n)
	}
	if got := s.sweepExpired(c.t); got != 1 {
		t.Fatalf("swept %d, want 1", got)
	}
	if p, ok := s.pending["k"]; !ok || !p.deleted {
		t.Fatal("sweep did not write a tombstone")
	}
	s.commit()
	if s.Len() != 1 {
		t.Fatalf("len %d after sweep", s.Len())
	}
}

func TestChangelogValueRoundTripAndRestore(t *testing.T) {
	c := &fakeClock{t: time.UnixMilli(1_700_000_000_000)}
	for _, e := range []entry{{value: []byte{}}, {value: []byte("abc"), expiresMs: 42}, {value: bytes.Repeat([]byte{7}, 1000), expiresMs: 1 << 50}} {
		got, err := decodeChangelogValue(encodeChangelogValue(e))
		if err != nil || !bytes.Equal(got.value, e.value) || got.expiresMs != e.expiresMs {
			t.Fatalf("round trip %v: %v %v", e, got, err)
		}
	}
	if _, err := decodeChangelogValue([]byte("garbage")); err == nil {
		t.Fatal("garbage decoded")
	}
	s := newStore(c.now)
	now := c.t.UnixMilli()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.restoreRecord([]byte("a"), encodeChangelogValue(entry{value: []byte("1")}), now))
	must(s.restoreRecord([]byte("a"), encodeChangelogValue(entry{value: []byte("2")}), now))
	must(s.restoreRecord([]byte("b"), encodeChangelogValue(entry{value: []byte("x")}), now))
	must(s.restoreRecord([]byte("b"), nil, now))
	must(s.restoreRecord([]byte("old"), encodeChangelogValue(entry{value: []byte("x"), expiresMs: now - 1}), now))
	if v, ok := s.Get("a"); !ok || string(v) != "2" || s.Len() != 1 || s.Bytes() != 2 {
		t.Fatalf("restored a=%q len %d bytes %d", v, s.Len(), s.Bytes())
	}
}
