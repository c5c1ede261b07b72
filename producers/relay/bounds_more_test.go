package relay

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyapp/roomflow/internal/testenv"
)

// Boundary tests for the exactly-once paths (issue 21): each fails when
// the boundary it pins moves by one (a `<` for a `<=`, a dropped equality
// check). docs/reliability.md lists the mutations they were checked against.

// TestFillTwiceLeavesNextHoleOpen: the second fill of an id that is no
// longer open is a no-op; in particular it does not close the next higher
// hole (which a lookup that lands on "the first hole at or above id" would).
func TestFillTwiceLeavesNextHoleOpen(t *testing.T) {
	t0 := time.UnixMilli(1_000_000)
	tr := NewTracker(Position{High: 20, ClockMs: t0.UnixMilli(), Holes: []Hole{
		{ID: 5, FirstSeenMs: t0.UnixMilli()}, {ID: 6, FirstSeenMs: t0.UnixMilli()}, {ID: 9, FirstSeenMs: t0.UnixMilli()},
	}}, 100, time.Hour, t0)
	if n := tr.Fill([]uint64{5}); n != 1 {
		t.Fatalf("first Fill(5) = %d, want 1", n)
	}
	if n := tr.Fill([]uint64{5}); n != 0 {
		t.Fatalf("second Fill(5) = %d, want 0 (5 is no longer open)", n)
	}
	if n := tr.Fill([]uint64{7, 8}); n != 0 {
		t.Fatalf("Fill(7, 8) = %d, want 0 (no holes; 9 is the next open one)", n)
	}
	if got := appendIDs(nil, tr.Position().Holes); !reflect.DeepEqual(got, []uint64{6, 9}) || tr.OpenHoles() != 2 {
		t.Fatalf("holes = %v (open %d), want [6 9]", got, tr.OpenHoles())
	}
	for id, want := range map[uint64]bool{5: false, 6: true, 7: false, 9: true, 10: false} {
		if got := tr.IsOpen(id); got != want {
			t.Errorf("IsOpen(%d) = %v, want %v", id, got, want)
		}
	}
	// The last hole filled twice: the tracker ends empty, not below zero.
	tr.Fill([]uint64{6, 9, 9, 6})
	if tr.OpenHoles() != 0 || len(tr.Position().Holes) != 0 {
		t.Fatalf("after filling all: open %d, holes %v", tr.OpenHoles(), tr.Position().Holes)
	}
}

// TestExpireAtExactlyGapMaxAge: a hole first seen at T is kept at exactly
// T + gap_max_age and given up 1 ms later, with OpenFor the age it reached.
// Also across a block boundary (the first block's last hole decides
// whether the whole block goes).
func TestExpireAtExactlyGapMaxAge(t *testing.T) {
	const maxAge = time.Minute
	t0 := time.UnixMilli(5_000_000)
	for _, n := range []int{1, blockHoles, blockHoles + 1} {
		holes := make([]Hole, n)
		for i := range holes {
			holes[i] = Hole{ID: uint64(i + 1), FirstSeenMs: t0.UnixMilli()}
		}
		// One younger hole, first seen 1 ms later, after them.
		holes = append(holes, Hole{ID: uint64(n + 10), FirstSeenMs: t0.UnixMilli() + 1})
		tr := NewTracker(Position{High: uint64(n + 20), ClockMs: t0.UnixMilli(), Holes: holes}, 10*blockHoles, maxAge, t0)
		if ab := tr.Expire(t0.Add(maxAge)); ab != nil {
			t.Fatalf("%d holes: Expire at exactly first-seen + gap_max_age = %+v, want nothing given up", n, ab)
		}
		if tr.OpenHoles() != n+1 {
			t.Fatalf("%d holes: open %d after Expire at the bound", n, tr.OpenHoles())
		}
		ab := tr.Expire(t0.Add(maxAge + time.Millisecond))
		want := []Abandoned{{From: 1, To: uint64(n), Reason: AbandonMaxAge, OpenFor: maxAge + time.Millisecond}}
		if !reflect.DeepEqual(ab, want) {
			t.Fatalf("%d holes: Expire 1 ms past the bound = %+v, want %+v", n, ab, want)
		}
		if got := appendIDs(nil, tr.Position().Holes); !reflect.DeepEqual(got, []uint64{uint64(n + 10)}) {
			t.Fatalf("%d holes: left %v, want only the younger hole", n, got)
		}
		if ab := tr.Expire(t0.Add(maxAge + 2*time.Millisecond)); len(ab) != 1 || ab[0].From != uint64(n+10) {
			t.Fatalf("%d holes: younger hole 1 ms past its bound: %+v", n, ab)
		}
	}
}

// TestMaxOpenGapsExactly: exactly max_open_gaps holes stay open; one more
// gives up the oldest, also when a single jump opens them.
func TestMaxOpenGapsExactly(t *testing.T) {
	t0 := time.UnixMilli(1_000_000)
	tr := NewTracker(Position{High: 0}, 3, time.Hour, t0)
	if ab, err := tr.Advance([]uint64{4}, t0); err != nil || ab != nil {
		t.Fatalf("3 holes under max 3: abandoned %+v, err %v", ab, err)
	}
	if tr.OpenHoles() != 3 {
		t.Fatalf("open = %d, want 3", tr.OpenHoles())
	}
	ab, err := tr.Advance([]uint64{6}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if want := []Abandoned{{From: 1, To: 1, Reason: AbandonMaxOpenGaps}}; !reflect.DeepEqual(ab, want) {
		t.Fatalf("4th hole: abandoned %+v, want %+v", ab, want)
	}
	tr = NewTracker(Position{High: 0}, 3, time.Hour, t0)
	ab, err = tr.Advance([]uint64{5}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if want := []Abandoned{{From: 1, To: 1, Reason: AbandonMaxOpenGaps}}; !reflect.DeepEqual(ab, want) {
		t.Fatalf("jump over 4 ids with max 3: abandoned %+v, want %+v", ab, want)
	}
	if got := appendIDs(nil, tr.Position().Holes); !reflect.DeepEqual(got, []uint64{2, 3, 4}) {
		t.Fatalf("holes = %v, want [2 3 4]", got)
	}
	// An id equal to High is a caller bug, not a new row.
	if _, err := tr.Advance([]uint64{5}, t0); err == nil {
		t.Fatal("Advance(High) accepted")
	}
}

// TestBudgetExactlyMaxBatchBytes: rows whose payloads add up to exactly
// relay.max_batch_bytes all fit; one byte more leaves the last row out.
func TestBudgetExactlyMaxBatchBytes(t *testing.T) {
	rows := func(sizes ...int) []Row {
		out := make([]Row, len(sizes))
		for i, n := range sizes {
			out[i] = Row{ID: uint64(i + 1), PayloadBytes: n}
		}
		return out
	}
	b := &Budget{Max: 100, Used: 10}
	if n := b.Fit(rows(40, 50)); n != 2 || b.Used != 100 {
		t.Fatalf("10 inline + 40 + 50 = max 100: Fit = %d (used %d), want 2 (100)", n, b.Used)
	}
	b = &Budget{Max: 100, Used: 10}
	if n := b.Fit(rows(40, 51)); n != 1 || b.Used != 50 {
		t.Fatalf("10 inline + 40 + 51 > max 100: Fit = %d (used %d), want 1 (50)", n, b.Used)
	}
	// A first row larger than the budget is taken alone; the next is not.
	b = &Budget{Max: 100}
	if n := b.Fit(rows(101, 1)); n != 1 || b.Used != 101 {
		t.Fatalf("Fit(101, 1) = %d (used %d), want 1 (101): the large row alone", n, b.Used)
	}
	// A row that is skipped (dead-lettered as too large) costs nothing.
	b = &Budget{Max: 100, Used: 60, Skip: func(r *Row) bool { return r.ID == 2 }}
	if n := b.Fit(rows(40, 1000, 0)); n != 3 || b.Used != 100 {
		t.Fatalf("Fit with a skipped row = %d (used %d), want 3 (100)", n, b.Used)
	}
	// A row whose payload came inline is not charged again.
	inl := rows(40, 70)
	inl[1].Payload = make([]byte, 70)
	b = &Budget{Max: 100, Used: 60}
	if n := b.Fit(inl); n != 2 || b.Used != 100 {
		t.Fatalf("Fit with an inline row = %d (used %d), want 2 (100)", n, b.Used)
	}
}

// TestReissueAtExactlyHighWater: AUTO_INCREMENT equal to the high-water id
// is a reissue (the next insert takes an id the relay has passed); one above
// it is not.
func TestReissueAtExactlyHighWater(t *testing.T) {
	m := testenv.NewMySQL(t)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	r := &Relay{cfg: Config{Table: "room_outbox"}, src: NewSource(m.DB, "room_outbox"), m: newMetrics(reg, func() float64 { return 0 })}
	if _, err := m.DB.ExecContext(ctx, "ALTER TABLE room_outbox AUTO_INCREMENT = 50"); err != nil {
		t.Fatal(err)
	}
	next, err := r.src.AutoIncrement(ctx)
	if err != nil || next != 50 {
		t.Fatalf("AutoIncrement = %d, %v; want 50", next, err)
	}
	if err := r.checkReissue(ctx, 49); err != nil {
		t.Fatalf("AUTO_INCREMENT 50 above high 49: %v", err)
	}
	if v, _ := testenv.Metric(reg, "roomflow_relay_id_reissue_detected"); v != 0 {
		t.Fatalf("gauge = %v, want 0", v)
	}
	err = r.checkReissue(ctx, 50)
	var re *IDReissueError
	if !errors.As(err, &re) || re.AutoIncrement != 50 || re.High != 50 || re.Table != "room_outbox" {
		t.Fatalf("AUTO_INCREMENT 50 equal to high 50: err = %v, want *IDReissueError{50, 50}", err)
	}
	if v, _ := testenv.Metric(reg, "roomflow_relay_id_reissue_detected"); v != 1 {
		t.Fatalf("gauge = %v, want 1", v)
	}
	if err := r.checkReissue(ctx, 51); !errors.As(err, &re) {
		t.Fatalf("AUTO_INCREMENT 50 below high 51: err = %v", err)
	}
}

// TestTrackerBlocksStayBounded: holes opened a few at a time, restored and
// given up keep every block non-empty and at most blockHoles long (a block
// past the bound re-encodes more than its share on every change), and the
// open count equals the holes held.
func TestTrackerBlocksStayBounded(t *testing.T) {
	t0 := time.UnixMilli(1_000_000)
	restored := make([]Hole, blockHoles-3)
	for i := range restored {
		restored[i] = Hole{ID: uint64(2*i + 1), FirstSeenMs: t0.UnixMilli()}
	}
	high := uint64(2 * len(restored))
	tr := NewTracker(Position{High: high, ClockMs: t0.UnixMilli(), Holes: restored}, 4*blockHoles, time.Hour, t0)
	check := func(when string) {
		t.Helper()
		n := 0
		for i, b := range tr.blocks {
			if len(b.holes) == 0 || len(b.holes) > blockHoles {
				t.Fatalf("%s: block %d holds %d holes, want 1..%d", when, i, len(b.holes), blockHoles)
			}
			n += len(b.holes)
		}
		if n != tr.OpenHoles() {
			t.Fatalf("%s: blocks hold %d holes, OpenHoles %d", when, n, tr.OpenHoles())
		}
	}
	check("restored")
	for range 5 { // 5 x 2 new holes: the first block fills up, the next one starts
		if _, err := tr.Advance([]uint64{high + 3}, t0); err != nil {
			t.Fatal(err)
		}
		high += 3
		check("advanced")
	}
	if got := len(tr.blocks); got != 2 || len(tr.blocks[0].holes) != blockHoles {
		t.Fatalf("%d blocks, the first of %d holes; want 2, the first full", got, len(tr.blocks[0].holes))
	}
	// One jump of 2.5 blocks, then trimmed from the front by the bound.
	if _, err := tr.Advance([]uint64{high + 2*blockHoles + blockHoles/2 + 1}, t0); err != nil {
		t.Fatal(err)
	}
	check("jumped")
	tr.Fill([]uint64{1, 3, 5})
	check("filled")
}

// probeModel is ProbeIDs over a plain sorted slice: all holes when they
// fit; else the youngest limit/4 and the rest of limit taken from the older
// holes at the cursor, wrapping around to the lowest.
type probeModel struct {
	holes  []uint64
	high   uint64
	cursor uint64
}

func (m *probeModel) probe(limit int) []uint64 {
	if len(m.holes) <= limit {
		return slices.Clone(m.holes)
	}
	young := m.holes[len(m.holes)-min(limit/4, len(m.holes)):]
	bound := m.high + 1
	if len(young) > 0 {
		bound = young[0]
	}
	n := limit - len(young)
	var after, wrapped []uint64
	for _, h := range m.holes {
		if h >= m.cursor && h < bound && len(after) < n {
			after = append(after, h)
		}
	}
	if len(after) < n {
		for _, h := range m.holes {
			if h < min(m.cursor, bound) && len(wrapped) < n-len(after) {
				wrapped = append(wrapped, h)
			}
		}
		if len(wrapped) > 0 {
			m.cursor = wrapped[len(wrapped)-1] + 1
		}
	} else {
		m.cursor = after[len(after)-1] + 1
	}
	return append(append(wrapped, after...), young...)
}

// TestProbeIDsMatchesModel: ProbeIDs and Youngest, over holes spread on
// several blocks, probe limits at and around the number of open holes and
// the block size, holes filled between probes, give exactly what the
// plain-slice model gives, probe after probe (so the rotation's cursor,
// wrap-around and bounds are pinned to the id).
func TestProbeIDsMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 1))
	t0 := time.UnixMilli(1_000_000)
	for round := range 60 {
		n := []int{3, 9, blockHoles - 1, blockHoles, blockHoles + 1, 2*blockHoles + 7}[round%6]
		m := &probeModel{}
		holes := make([]Hole, 0, n)
		id := uint64(0)
		for range n {
			id += 1 + uint64(rng.IntN(3))
			holes = append(holes, Hole{ID: id, FirstSeenMs: t0.UnixMilli()})
			m.holes = append(m.holes, id)
		}
		m.high = id + uint64(rng.IntN(3)) + 1
		tr := NewTracker(Position{High: m.high, ClockMs: t0.UnixMilli(), Holes: holes}, 10*blockHoles, time.Hour, t0)
		limits := []int{1, 2, 3, 4, 5, 8, n - 1, n, n + 1, blockHoles, max(1, n/3)}
		for step := range 12 {
			limit := max(1, limits[rng.IntN(len(limits))])
			want := m.probe(limit)
			got := tr.ProbeIDs(limit)
			if !slices.Equal(got, want) {
				t.Fatalf("round %d (%d holes), probe %d, limit %d:\n got %v\nwant %v", round, len(m.holes), step, limit, head(got), head(want))
			}
			k := rng.IntN(len(m.holes) + 2)
			young := m.holes[len(m.holes)-min(k, len(m.holes)):]
			if got := tr.Youngest(k); !slices.Equal(got, young) {
				t.Fatalf("round %d: Youngest(%d) = %v, want %v", round, k, head(got), head(young))
			}
			// Fill a few holes, at the cursor's neighbourhood too.
			for range rng.IntN(3) {
				if len(m.holes) <= 1 {
					break
				}
				i := rng.IntN(len(m.holes))
				tr.Fill([]uint64{m.holes[i]})
				m.holes = slices.Delete(m.holes, i, i+1)
			}
		}
	}
}

// head is the first ids of a long list, for failure messages.
func head(ids []uint64) []uint64 { return ids[:min(len(ids), 20)] }

// TestProbeIDsCursorOnBlockEnd: the rotation's cursor lands exactly on the
// last hole of a block (holes 1..blockHoles+400 consecutive, a first probe
// of 1364 ids takes the youngest 341 and the older 1..1023): the next probe
// starts at that hole, blockHoles, not at the next block.
func TestProbeIDsCursorOnBlockEnd(t *testing.T) {
	t0 := time.UnixMilli(1_000_000)
	m := &probeModel{high: blockHoles + 500}
	var holes []Hole
	for id := uint64(1); id <= blockHoles+400; id++ {
		holes = append(holes, Hole{ID: id, FirstSeenMs: t0.UnixMilli()})
		m.holes = append(m.holes, id)
	}
	tr := NewTracker(Position{High: m.high, ClockMs: t0.UnixMilli(), Holes: holes}, 10*blockHoles, time.Hour, t0)
	const limit = 1364 // limit - limit/4 = blockHoles - 1
	for probe := range 3 {
		want, got := m.probe(limit), tr.ProbeIDs(limit)
		if !slices.Equal(got, want) {
			t.Fatalf("probe %d: got %v..., want %v...", probe, head(got), head(want))
		}
		if probe == 0 && m.cursor != blockHoles {
			t.Fatalf("model cursor %d after the first probe, want %d: the case does not hit the block end", m.cursor, blockHoles)
		}
	}
}

// TestExpireDisabledWithoutMaxAge: a tracker without an age bound (maxAge
// 0, which NewTracker accepts; the relay's config requires a positive
// gap_max_age) never gives a hole up for its age.
func TestExpireDisabledWithoutMaxAge(t *testing.T) {
	t0 := time.UnixMilli(1_000_000)
	tr := NewTracker(Position{High: 10, ClockMs: t0.UnixMilli(), Holes: []Hole{{ID: 5, FirstSeenMs: t0.UnixMilli() - 1}}}, 10, 0, t0)
	if ab := tr.Expire(t0.Add(100 * time.Hour)); ab != nil || tr.OpenHoles() != 1 {
		t.Fatalf("Expire without max age = %+v, open %d; want nothing given up", ab, tr.OpenHoles())
	}
}

// TestDecodePositionBounds: positions exactly at the decoder's bounds
// decode (a clock of MaxInt64, a hole first seen exactly at the clock,
// holes 1..High, maxDecodedHoles holes in one range); one past them, or a
// record cut short, is ErrBadPosition.
func TestDecodePositionBounds(t *testing.T) {
	ok := []Position{
		{High: 7, ClockMs: math.MaxInt64},
		{High: 9, ClockMs: 100, Holes: []Hole{{ID: 2, FirstSeenMs: 40}, {ID: 5, FirstSeenMs: 100}}},
		{High: 3, ClockMs: 5, Holes: []Hole{{ID: 1, FirstSeenMs: 5}, {ID: 2, FirstSeenMs: 5}, {ID: 3, FirstSeenMs: 5}}},
	}
	all := Position{High: maxDecodedHoles + 5, ClockMs: 1}
	for id := uint64(1); id <= maxDecodedHoles; id++ {
		all.Holes = append(all.Holes, Hole{ID: id, FirstSeenMs: 1})
	}
	ok = append(ok, all)
	for i, p := range ok {
		got, err := DecodePosition(EncodePosition(p))
		if err != nil || got.High != p.High || got.ClockMs != p.ClockMs || !reflect.DeepEqual(got.Holes, p.Holes) && len(p.Holes) > 0 {
			t.Fatalf("position %d (%d holes): decoded %d holes, err %v", i, len(p.Holes), len(got.Holes), err)
		}
	}
	// Version 1: no holes at all (a count equal to the bytes left, 0), and
	// exactly maxDecodedHoles holes (1..max, each first seen at 0).
	v1 := binary.AppendUvarint([]byte{positionVersion1}, maxDecodedHoles+5)
	v1 = binary.AppendUvarint(v1, maxDecodedHoles)
	for range maxDecodedHoles {
		v1 = append(v1, 1, 0) // delta 1, time +0
	}
	for name, b := range map[string][]byte{"v1 without holes": {positionVersion1, 10, 0}, "v1 with maxDecodedHoles": v1,
		"v1 hole at High": {positionVersion1, 3, 1, 3, 0}} {
		if p, err := DecodePosition(b); err != nil || p.High == 0 {
			t.Fatalf("%s: %+v, %v", name, p.High, err)
		}
	}
	bad := map[string][]byte{
		"a hole seen after the clock": EncodePosition(Position{High: 9, ClockMs: 100, Holes: []Hole{{ID: 1, FirstSeenMs: 60}, {ID: 3, FirstSeenMs: 110}}}),
		"a hole above High":           EncodePosition(Position{High: 3, ClockMs: 5, Holes: []Hole{{ID: 3, FirstSeenMs: 1}, {ID: 4, FirstSeenMs: 1}}}),
		"one hole too many":           EncodePosition(Position{High: maxDecodedHoles + 5, ClockMs: 1, Holes: append(slices.Clone(all.Holes), Hole{ID: maxDecodedHoles + 1, FirstSeenMs: 1})}),
		"v1 cut in a hole's time":     {positionVersion1, 10, 1, 2},
		"v1 hole count past the data": {positionVersion1, 10, 2, 2, 0},
	}
	for name, b := range bad {
		if _, err := DecodePosition(b); !errors.Is(err, ErrBadPosition) {
			t.Errorf("%s: err %v, want ErrBadPosition", name, err)
		}
	}
}
