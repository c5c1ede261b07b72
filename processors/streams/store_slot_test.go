package streams

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"
	"time"
)

// TestStoreSlotEqualsPut: a store written with GetSlot and PutSlot (the
// slot sometimes stale: another write, a rejected record or a commit in
// between, or another key) ends every transaction with the state, the
// changelog and the undo of a twin store written with Put.
func TestStoreSlotEqualsPut(t *testing.T) {
	for seed := uint64(0); seed < 200; seed++ {
		r := rand.New(rand.NewPCG(seed, 11))
		c := &fakeClock{t: time.UnixMilli(1_700_000_000_000)}
		a, b := newStore(c.now), newStore(c.now) // a: slots, b: Put
		var stale Slot
		for txn := 0; txn < 30; txn++ {
			for rec := 0; rec < 1+r.IntN(6); rec++ {
				a.beginRecord()
				b.beginRecord()
				for op := 0; op < 1+r.IntN(4); op++ {
					k := fmt.Sprintf("k%d", r.IntN(8))
					v := []byte(fmt.Sprintf("v-%d-%d-%d", txn, rec, op))
					switch r.IntN(6) {
					case 0:
						a.Delete(k)
						b.Delete(k)
					case 1:
						a.PutTTL(k, v, time.Second)
						b.PutTTL(k, v, time.Second)
					case 2: // a slot from an earlier step, or of another key
						a.PutSlot(&stale, k, v)
						b.Put(k, v)
					default:
						av, aok, sl := a.GetSlot(k)
						bv, bok := b.Get(k)
						if aok != bok || string(av) != string(bv) {
							t.Fatalf("seed %d: GetSlot %s = %q %v, Get %q %v", seed, k, av, aok, bv, bok)
						}
						if r.IntN(4) == 0 {
							o := fmt.Sprintf("k%d", r.IntN(8))
							a.Put(o, []byte("between"))
							b.Put(o, []byte("between"))
						}
						a.PutSlot(&sl, k, v)
						b.Put(k, v)
						stale = sl
					}
				}
				endTwinStep(r, a, b)
			}
			endTwinTxn(t, r, a, b, fmt.Sprintf("seed %d txn %d, with slots and with Put", seed, txn))
			c.t = c.t.Add(time.Duration(r.IntN(1500)) * time.Millisecond)
		}
	}
}

// endTwinStep ends the step of two stores fed the same writes: both keep
// it or, one in four, both reject it.
func endTwinStep(r *rand.Rand, a, b *Store) {
	if r.IntN(4) == 0 {
		a.rejectRecord()
		b.rejectRecord()
		return
	}
	a.endRecord()
	b.endRecord()
}

// endTwinTxn ends the transaction of two stores that must agree: their
// changelogs, then, after both commit or (one in three) both abort, their
// state, length and bytes.
func endTwinTxn(t *testing.T, r *rand.Rand, a, b *Store, what string) {
	t.Helper()
	if ca, cb := changelog(a), changelog(b); !maps.Equal(ca, cb) {
		t.Fatalf("%s: changelogs %v and %v", what, ca, cb)
	}
	if r.IntN(3) == 0 {
		a.abort()
		b.abort()
	} else {
		a.commit()
		b.commit()
	}
	if sa, sb := contents(a), contents(b); !maps.Equal(sa, sb) || a.Len() != b.Len() || a.Bytes() != b.Bytes() {
		t.Fatalf("%s: states %v and %v", what, sa, sb)
	}
}

func changelog(s *Store) map[string]string {
	m := map[string]string{}
	s.eachDirty(func(k string, e entry, deleted bool) {
		m[k] = fmt.Sprintf("%q %d %v", e.value, e.expiresMs, deleted)
	})
	return m
}

func contents(s *Store) map[string]string {
	m := map[string]string{}
	s.Range(func(k string, v []byte) bool { m[k] = string(v); return true })
	return m
}

// TestStoreRollbacks: Rollbacks moves on an undo, an abort and a restore,
// never on a write or a commit.
func TestStoreRollbacks(t *testing.T) {
	s := newStore(time.Now)
	n := s.Rollbacks()
	s.beginRecord()
	s.Put("k", []byte("v"))
	s.endRecord()
	s.commit()
	if s.Rollbacks() != n {
		t.Fatalf("a write and a commit moved Rollbacks")
	}
	for i, undo := range []func(){
		func() { s.beginRecord(); s.Put("k", []byte("w")); s.rejectRecord() },
		func() { s.Put("k", []byte("x")); s.abort() },
		func() { _ = s.restoreRecord([]byte("k"), encodeChangelogValue(entry{value: []byte("y")}), 0) },
	} {
		undo()
		if s.Rollbacks() != n+uint64(i)+1 {
			t.Fatalf("undo %d: Rollbacks %d, want %d", i, s.Rollbacks(), n+uint64(i)+1)
		}
	}
}
