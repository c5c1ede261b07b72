package streams

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
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
	if _, deleted, ok := s.dirtyValue("k"); !ok || !deleted {
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

// A transaction's writes reach the changelog once per key, with the last
// value (a tombstone for a last Delete), in first-write order; an aborted
// transaction leaves no changelog write and the committed state as it was.
func TestStoreCoalescesPerKeyAndAbortLeavesNoWrite(t *testing.T) {
	c := &fakeClock{t: time.UnixMilli(1_700_000_000_000)}
	s := newStore(c.now)
	s.Put("keep", []byte("k0"))
	s.Put("gone", []byte("g0"))
	s.commit()
	type rec struct {
		key, value string
		deleted    bool
	}
	changelog := func() []rec {
		var out []rec
		s.eachDirty(func(k string, e entry, deleted bool) {
			out = append(out, rec{k, string(e.value), deleted})
		})
		return out
	}

	s.Put("keep", []byte("k1"))
	s.Put("new", []byte("n1"))
	s.Put("keep", []byte("k2"))
	s.Delete("gone")
	s.Put("new", []byte("n2"))
	s.Put("gone", []byte("g1"))
	s.Delete("gone")
	got := changelog()
	want := []rec{{"keep", "k2", false}, {"new", "n2", false}, {"gone", "", true}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("changelog of the transaction = %v, want %v", got, want)
	}
	bytesBefore := s.Bytes()
	s.abort()
	if got := changelog(); len(got) != 0 {
		t.Fatalf("aborted transaction left changelog writes %v", got)
	}
	for k, want := range map[string]string{"keep": "k0", "gone": "g0"} {
		if v, ok := s.Get(k); !ok || string(v) != want {
			t.Fatalf("after abort %s = %q %v, want %q", k, v, ok, want)
		}
	}
	if _, ok := s.Get("new"); ok {
		t.Fatal("after abort a key created by the transaction exists")
	}
	if s.Len() != 2 || s.Bytes() != bytesBefore || s.Bytes() != int64(len("keepk0gonekg0")-1) {
		t.Fatalf("after abort len %d bytes %d", s.Len(), s.Bytes())
	}

	// A rejected record's first write of a key leaves no changelog write.
	s.beginRecord()
	s.Put("keep", []byte("k3"))
	s.endRecord()
	s.beginRecord()
	s.Put("only-rejected", []byte("x"))
	s.Put("keep", []byte("k4"))
	s.rejectRecord()
	if got, want := changelog(), []rec{{"keep", "k3", false}}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("changelog after a rejected record = %v, want %v", got, want)
	}
}

// The store numbers its transactions in the entries it writes; when the
// number wraps, a key written 2^32 transactions ago is not taken for one
// the open transaction wrote (it gets its own changelog write).
func TestStoreTransactionNumberWraps(t *testing.T) {
	c := &fakeClock{t: time.UnixMilli(1_700_000_000_000)}
	s := newStore(c.now)
	s.Put("old", []byte("o1")) // in transaction 1
	s.commit()
	s.gen = math.MaxUint32 // 2^32-2 transactions later
	s.Put("other", []byte("x"))
	s.commit() // wraps to transaction 1 again
	s.Put("other", []byte("y"))
	s.Put("old", []byte("o2"))
	var got []string
	s.eachDirty(func(k string, e entry, deleted bool) { got = append(got, k+"="+string(e.value)) })
	if want := []string{"other=y", "old=o2"}; !slices.Equal(got, want) {
		t.Fatalf("changelog after the wrap = %v, want %v", got, want)
	}
	s.abort()
	if v, _ := s.Get("old"); string(v) != "o1" {
		t.Fatalf("after abort old = %q, want o1", v)
	}
}

// Random transactions (committed, aborted, with rejected records, TTLs and
// deletes) against an independent model: the live state always equals the
// model's, and a store restored from the changelog records the commits
// produced (coalesced per key) equals the committed state.
func TestStoreRandomTransactionsRestoreEqualsLive(t *testing.T) {
	for seed := uint64(0); seed < 200; seed++ {
		r := rand.New(rand.NewPCG(seed, 7))
		c := &fakeClock{t: time.UnixMilli(1_700_000_000_000)}
		s := newStore(c.now)
		committed := map[string]entry{} // the model
		type clRec struct {
			key   string
			value []byte // nil: tombstone
		}
		var log []clRec
		for txn := 0; txn < 30; txn++ {
			view := maps.Clone(committed)
			for rec := 0; rec < 1+r.IntN(6); rec++ {
				s.beginRecord()
				recView := maps.Clone(view)
				for op := 0; op < 1+r.IntN(4); op++ {
					k := fmt.Sprintf("k%d", r.IntN(12))
					switch r.IntN(5) {
					case 0:
						s.Delete(k)
						delete(recView, k)
					case 1:
						v := []byte(fmt.Sprintf("ttl-%d-%d", txn, op))
						ttl := time.Duration(1+r.IntN(3)) * time.Second
						s.PutTTL(k, v, ttl)
						recView[k] = entry{value: v, expiresMs: c.t.Add(ttl).UnixMilli()}
					default:
						v := []byte(fmt.Sprintf("v-%d-%d-%d", txn, rec, op))
						s.Put(k, v)
						recView[k] = entry{value: v}
					}
				}
				if r.IntN(4) == 0 {
					s.rejectRecord()
				} else {
					s.endRecord()
					view = recView
				}
			}
			if r.IntN(5) == 0 {
				s.sweepExpired(c.t)
				for k, e := range view {
					if !e.live(c.t.UnixMilli()) {
						delete(view, k)
					}
				}
			}
			checkStore(t, seed, s, view, c)
			if r.IntN(3) == 0 {
				s.abort()
			} else {
				s.eachDirty(func(k string, e entry, deleted bool) {
					var v []byte
					if !deleted {
						v = encodeChangelogValue(e)
					}
					log = append(log, clRec{k, v})
				})
				s.commit()
				committed = view
			}
			checkStore(t, seed, s, committed, c)
			c.t = c.t.Add(time.Duration(r.IntN(1500)) * time.Millisecond)
		}
		restored := newStore(c.now)
		for _, rec := range log {
			if err := restored.restoreRecord([]byte(rec.key), rec.value, c.t.UnixMilli()); err != nil {
				t.Fatal(err)
			}
		}
		live := map[string]string{}
		s.Range(func(k string, v []byte) bool { live[k] = string(v); return true })
		got := map[string]string{}
		restored.Range(func(k string, v []byte) bool { got[k] = string(v); return true })
		if !maps.Equal(live, got) {
			t.Fatalf("seed %d: restored %v, live %v", seed, got, live)
		}
	}
}

func checkStore(t *testing.T, seed uint64, s *Store, want map[string]entry, c *fakeClock) {
	t.Helper()
	now := c.t.UnixMilli()
	for i := 0; i < 12; i++ {
		k := fmt.Sprintf("k%d", i)
		e, ok := want[k]
		ok = ok && e.live(now)
		v, got := s.Get(k)
		if got != ok || ok && !bytes.Equal(v, e.value) {
			t.Fatalf("seed %d: %s = %q %v, want %q %v", seed, k, v, got, e.value, ok)
		}
	}
	if len(s.txn) == 0 {
		n, b := 0, int64(0)
		for k, e := range want {
			n++
			b += int64(len(k) + len(e.value))
		}
		if s.Len() != n || s.Bytes() != b {
			t.Fatalf("seed %d: len %d bytes %d, want %d %d", seed, s.Len(), s.Bytes(), n, b)
		}
	}
}

// TestRestoreMarkerKeyIsReserved: the store refuses the marker key, and a
// marker restored as an ordinary record (by a runtime from before the
// markers, after a rollback) leaves no key behind.
func TestRestoreMarkerKeyIsReserved(t *testing.T) {
	c := &fakeClock{t: time.UnixMilli(1_700_000_000_000)}
	s := newStore(c.now)
	if err := s.restoreRecord([]byte(markerKey), markerValue("roomflow-mic-pod-1"), c.t.UnixMilli()); err != nil {
		t.Fatal(err)
	}
	if s.Len() != 0 || s.Bytes() != 0 {
		t.Fatalf("a marker restored as a record left %d keys, %d bytes", s.Len(), s.Bytes())
	}
	for name, write := range map[string]func(){
		"Put":    func() { s.Put(markerKey, []byte("x")) },
		"PutTTL": func() { s.PutTTL(markerKey, []byte("x"), time.Minute) },
		"Delete": func() { s.Delete(markerKey) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s of the marker key did not panic", name)
				}
			}()
			write()
		}()
	}
}
