package mic_test

import (
	"testing"
	"time"

	"github.com/hyapp/roomflow/processors/mic"
)

// FuzzDecodeAndHandle feeds arbitrary record values through the decoder
// and, when they decode, through the state machine (on a state the corpus
// entry builds up), then a timer close: nothing may panic, every output
// must keep its invariants, and the state must stay decodable.
func FuzzDecodeAndHandle(f *testing.F) {
	seeds := []mic.Event{
		e("a", "up", t0), e("b", "publish_confirmed", t0+sec, pubAt(t0-sec)), e("c", "change", t0+2*sec, seat(4)),
		e("d", "down", t0+hour, rtcStop(t0+30*mins), reason("kick")), e("x", "down", t0, session("")),
		e("y", "teleport", t0), e("z", "up", mic.MaxTimeMs-1),
	}
	for _, s := range seeds {
		f.Add(s.Encode(), int64(0))
	}
	f.Add([]byte{0x0a, 0x01, 'a'}, int64(12345))
	f.Add([]byte("garbage"), int64(-1))
	pol := mic.Policy{PendingPublishMaxAge: 2 * time.Minute, PublishingSessionMaxAge: 12 * time.Hour}
	f.Fuzz(func(t *testing.T, value []byte, nowOffset int64) {
		st := mic.NewMapState()
		// Prime the session the seeds name, so later actions meet state.
		up := e("prime", "up", t0)
		mic.Handle(st, &up)
		ev, err := mic.Decode(value, "")
		if err != nil {
			return
		}
		for i := 0; i < 2; i++ { // the second time is a duplicate
			out := mic.Handle(st, &ev)
			if i == 1 && out.Outcome == mic.OutcomeConsumed {
				t.Fatalf("duplicate consumed again: %+v", ev)
			}
			checkOutput(t, &ev, out)
		}
		for k := range st.Sessions {
			id, err := mic.ParseSessionKey(k)
			if err != nil {
				t.Fatal(err)
			}
			s, _ := st.Session(id)
			out, ok := mic.Compensate(st, pol, id, s.SeatStartedAtMs+nowOffset)
			if ok {
				if l := out.Ledger.Session; l.MicOnlineMs > l.SeatOccupiedMs || l.SeatOccupiedMs < 0 || l.MicOnlineMs < 0 {
					t.Fatalf("timer close %v", l)
				}
			}
		}
	})
}
