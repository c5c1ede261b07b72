package mic_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/hyapp/roomflow/processors/mic"
	"github.com/hyapp/roomflow/processors/mic/mictest"
)

// TestPropertyRandomStreams: random valid streams with duplicates, skips,
// cross-day sessions and sessions left open (closed by timers at the end)
// give daily sums equal to lifetime totals and to the independent
// reference, with mic_online <= seat_occupied everywhere.
func TestPropertyRandomStreams(t *testing.T) {
	pol := mic.Policy{PendingPublishMaxAge: 2 * time.Minute, PublishingSessionMaxAge: 12 * time.Hour}
	iters := 300
	if testing.Short() {
		iters = 30
	}
	for it := 0; it < iters; it++ {
		seed := uint64(it)
		r := rand.New(rand.NewPCG(seed, 0x5eed))
		g := mictest.Gen{Users: 1 + r.IntN(20), Sessions: 1 + r.IntN(120), StartMs: t0, SpreadMs: 4 * 24 * hour,
			MaxLen: time.Duration(1+r.IntN(60)) * time.Hour, DupRate: 0.2, OpenRate: 0.15, Skips: true}
		stream := mictest.Generate(r, g)
		st := mic.NewMapState()
		tally := mictest.NewTally()
		consumed := map[string]int{}
		for i := range stream.Events {
			ev := stream.Events[i]
			out := mic.Handle(st, &ev)
			if out.Ledger != nil {
				if out.Outcome == mic.OutcomeConsumed {
					consumed[ev.EventID]++
				}
				tally.Apply(out.Ledger)
			}
		}
		// Timers close what is left open, in batches.
		var cands []mic.Candidate
		for k := range st.Sessions {
			id, _ := mic.ParseSessionKey(k)
			s, _ := st.Session(id)
			if s.Status.Open() {
				cands = append(cands, mic.Candidate{Key: k, DueAtMs: pol.DueAtMs(&s)})
			}
		}
		now := t0 + 30*24*hour
		for len(cands) > 0 {
			batch := mic.SelectDue(cands, now, 7)
			if len(batch) == 0 {
				t.Fatalf("seed %d: %d open sessions never due", seed, len(cands))
			}
			done := map[string]bool{}
			for _, c := range batch {
				id, _ := mic.ParseSessionKey(c.Key)
				out, ok := mic.Compensate(st, pol, id, now)
				if !ok {
					t.Fatalf("seed %d: due session %v not closed", seed, id)
				}
				consumed[out.Ledger.EventId]++
				tally.Apply(out.Ledger)
				done[c.Key] = true
			}
			rest := cands[:0]
			for _, c := range cands {
				if !done[c.Key] {
					rest = append(rest, c)
				}
			}
			cands = rest
		}
		for id, n := range consumed {
			if n != 1 {
				t.Fatalf("seed %d: event %s consumed %d times", seed, id, n)
			}
		}
		if tally.Err != nil {
			t.Fatalf("seed %d: %v", seed, tally.Err)
		}
		want := mictest.Expect(mictest.Close(stream.Sessions, pol))
		if d := mictest.Diff(tally.Totals, want); d != "" {
			t.Fatalf("seed %d: totals differ from the reference:\n%s", seed, d)
		}
		for u, sum := range tally.SumDaily() {
			l := tally.Lifetime[u]
			if l == nil || l.SeatMs != sum.SeatMs || l.OnlineMs != sum.OnlineMs || l.OnlineMs > l.SeatMs {
				t.Fatalf("seed %d: user %v daily sums %+v != lifetime %+v", seed, u, sum, l)
			}
		}
		// Every session closed exactly once with its truth.
		truths := mictest.Close(stream.Sessions, pol)
		if len(tally.Sessions) != len(truths) {
			t.Fatalf("seed %d: %d sessions tallied, want %d", seed, len(tally.Sessions), len(truths))
		}
		for _, tr := range truths {
			s := tally.Sessions[tr.MicSessionID]
			if s == nil || s.Status != "ended" || s.EndReason != tr.EndReason || s.CurrentSeatNo != tr.LastSeat ||
				s.EndedAtMs != max(tr.EndMs, tr.SeatStartMs) || s.UserId != tr.UserID || s.RoomId != tr.RoomID {
				t.Fatalf("seed %d: session %s = %v, truth %+v", seed, tr.MicSessionID, s, tr)
			}
		}
		// Skips the generator planted are recorded with the design's reasons.
		reasons := map[string]bool{}
		for _, r := range tally.Skipped {
			reasons[r] = true
		}
		for _, r := range []string{mic.SkipIncomplete, mic.SkipUnknownSession, mic.SkipUnknownAction} {
			if !reasons[r] {
				keys := make([]string, 0, len(reasons))
				for k := range reasons {
					keys = append(keys, k)
				}
				sort.Strings(keys)
				t.Fatalf("seed %d: skip reason %s never recorded (got %v)", seed, r, keys)
			}
		}
	}
}

// TestScratchMatchesFreshOutputs: a reused Scratch (the processor's path)
// gives byte-identical outputs and state to freshly allocated outputs, on
// random streams with cross-day sessions, skips, duplicates and timer
// closes — the scratch never leaks one output into the next. The fresh
// ledger entries carry their snapshot message (AppendLedgerEntry's bytes),
// the scratch's none: AppendLedger writes the same bytes from the state.
func TestScratchMatchesFreshOutputs(t *testing.T) {
	pol := mic.Policy{PendingPublishMaxAge: 2 * time.Minute, PublishingSessionMaxAge: 12 * time.Hour}
	encode := func(out mic.Output) string {
		var b []byte
		if out.Ledger != nil {
			b = mic.AppendLedger(b, &out)
		}
		if out.Closed != nil {
			b = mic.AppendSessionClosed(b, out.Closed)
		}
		for _, d := range out.Daily {
			b = mic.AppendDailyStatsUpdated(b, d)
		}
		if out.Lifetime != nil {
			b = mic.AppendLifetimeStatsUpdated(b, out.Lifetime)
		}
		return fmt.Sprintf("%d/%s/%d/%d/%x", out.Outcome, out.SkipReason, out.Before, out.After, b)
	}
	for it := 0; it < 40; it++ {
		r := rand.New(rand.NewPCG(uint64(it), 0x5c7a))
		stream := mictest.Generate(r, mictest.Gen{Users: 1 + r.IntN(10), Sessions: 1 + r.IntN(80), StartMs: t0,
			SpreadMs: 4 * 24 * hour, MaxLen: time.Duration(1+r.IntN(60)) * time.Hour, DupRate: 0.2, OpenRate: 0.2, Skips: true})
		fresh, reused := mic.NewMapState(), mic.NewMapState()
		var sc mic.Scratch
		for i := range stream.Events {
			ev := stream.Events[i]
			want := encode(mic.Handle(fresh, &ev))
			if ev.Action == mic.ActionUp && i%7 == 0 {
				if a, b := encode(mic.SkipTooOld(&ev)), encode(sc.SkipTooOld(&ev)); a != b {
					t.Fatalf("seed %d event %d: SkipTooOld %s, with scratch %s", it, i, a, b)
				}
			}
			if got := encode(sc.Handle(reused, &ev)); got != want {
				t.Fatalf("seed %d event %d: scratch output %s, want %s", it, i, got, want)
			}
		}
		now := t0 + 30*24*hour
		for k := range fresh.Sessions {
			id, _ := mic.ParseSessionKey(k)
			a, okA := mic.Compensate(fresh, pol, id, now)
			b, okB := sc.Compensate(reused, pol, id, now)
			if okA != okB || encode(a) != encode(b) {
				t.Fatalf("seed %d: compensate %s: %v %s, with scratch %v %s", it, k, okA, encode(a), okB, encode(b))
			}
		}
		if !reflect.DeepEqual(fresh, reused) {
			t.Fatalf("seed %d: states differ", it)
		}
	}
}
