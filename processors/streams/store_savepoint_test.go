package streams

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"
	"time"
)

// TestStoreSavepointEqualsNeverWritten: a step that rolls its store back to
// a savepoint ends every transaction with the state, the changelog, the
// byte counts and (after an abort) the committed state of a twin store
// that never made the writes rolled back; the step's writes before the
// savepoint stay, and a rejected step still undoes them all.
func TestStoreSavepointEqualsNeverWritten(t *testing.T) {
	for seed := uint64(0); seed < 300; seed++ {
		r := rand.New(rand.NewPCG(seed, 13))
		c := &fakeClock{t: time.UnixMilli(1_700_000_000_000)}
		a, b := newStore(c.now), newStore(c.now) // a: rolls back; b: never wrote it
		write := func(s *Store, k string, v []byte, op int) {
			switch op {
			case 0:
				s.Delete(k)
			case 1:
				s.PutTTL(k, v, time.Second)
			default:
				_, _, sl := s.GetSlot(k)
				s.PutSlot(&sl, k, v)
			}
		}
		for txn := 0; txn < 20; txn++ {
			for step := 0; step < 1+r.IntN(5); step++ {
				a.beginRecord()
				b.beginRecord()
				for unit := 0; unit < 1+r.IntN(4); unit++ {
					sp := a.Savepoint()
					drop := r.IntN(3) == 0
					for op := 0; op < 1+r.IntN(4); op++ {
						k, v, o := fmt.Sprintf("k%d", r.IntN(6)), []byte(fmt.Sprintf("v-%d-%d-%d-%d", txn, step, unit, op)), r.IntN(5)
						write(a, k, v, o)
						if !drop {
							write(b, k, v, o)
						}
					}
					if drop {
						a.RollbackTo(sp)
					}
					if sa, sb := contents(a), contents(b); !maps.Equal(sa, sb) {
						t.Fatalf("seed %d txn %d step %d unit %d: state %v, never written %v", seed, txn, step, unit, sa, sb)
					}
				}
				endTwinStep(r, a, b)
			}
			endTwinTxn(t, r, a, b, fmt.Sprintf("seed %d txn %d, rolled back and never written", seed, txn))
			c.t = c.t.Add(time.Duration(r.IntN(1500)) * time.Millisecond)
		}
	}
}

// A savepoint is only of its own store's running step.
func TestStoreSavepointMisuse(t *testing.T) {
	mustPanic := func(what string, fn func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Fatalf("%s did not panic", what)
			}
		}()
		fn()
	}
	s, o := newStore(time.Now), newStore(time.Now)
	mustPanic("Savepoint outside a step", func() { s.Savepoint() })
	s.beginRecord()
	o.beginRecord()
	sp := s.Savepoint()
	mustPanic("RollbackTo on another store", func() { o.RollbackTo(sp) })
	s.Put("k", []byte("v"))
	s.endRecord()
	mustPanic("RollbackTo after its step ended", func() { s.RollbackTo(sp) })
}
