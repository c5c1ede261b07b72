package relay

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

func holes(seen int64, ids ...uint64) []Hole {
	hs := make([]Hole, len(ids))
	for i, id := range ids {
		hs[i] = Hole{ID: id, FirstSeenMs: seen}
	}
	return hs
}

func TestTrackerAdvance(t *testing.T) {
	t0 := time.UnixMilli(1_000_000)
	tests := []struct {
		name      string
		start     Position
		maxHoles  int
		ids       []uint64
		want      Position
		abandoned []Abandoned
		err       bool
	}{
		{name: "contiguous", start: Position{High: 10}, maxHoles: 10, ids: []uint64{11, 12, 13},
			want: Position{High: 13, Holes: []Hole{}}},
		{name: "empty scan keeps position", start: Position{High: 10, Holes: holes(5, 3)}, maxHoles: 10,
			want: Position{High: 10, Holes: holes(5, 3)}},
		{name: "skipped ids become holes", start: Position{High: 10}, maxHoles: 10, ids: []uint64{12, 13, 16},
			want: Position{High: 16, Holes: holes(t0.UnixMilli(), 11, 14, 15)}},
		{name: "new holes append after old", start: Position{High: 10, Holes: holes(5, 4)}, maxHoles: 10, ids: []uint64{12},
			want: Position{High: 12, Holes: append(holes(5, 4), holes(t0.UnixMilli(), 11)...)}},
		{name: "bound evicts oldest", start: Position{High: 10, Holes: holes(5, 2, 3)}, maxHoles: 3, ids: []uint64{13},
			want:      Position{High: 13, Holes: append(holes(5, 3), holes(t0.UnixMilli(), 11, 12)...)},
			abandoned: []Abandoned{{From: 2, To: 2, Reason: AbandonMaxOpenGaps, OpenFor: time.Duration(t0.UnixMilli()-5) * time.Millisecond}}},
		{name: "huge jump abandons lower part at once", start: Position{High: 0}, maxHoles: 2, ids: []uint64{1_000_001},
			want:      Position{High: 1_000_001, Holes: holes(t0.UnixMilli(), 999_999, 1_000_000)},
			abandoned: []Abandoned{{From: 1, To: 999_998, Reason: AbandonMaxOpenGaps}}},
		{name: "id not above high is a bug", start: Position{High: 10}, maxHoles: 3, ids: []uint64{10}, err: true,
			want: Position{High: 10}},
		{name: "unsorted is a bug", start: Position{High: 10}, maxHoles: 3, ids: []uint64{12, 11}, err: true,
			want: Position{High: 10}},
		{name: "id above MaxOutboxID is refused", start: Position{High: 10}, maxHoles: 3, ids: []uint64{12, MaxOutboxID + 1}, err: true,
			want: Position{High: 10}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// The position clock of a restored position continues from
			// t0: the leader starts at its own time zero.
			start := tc.start
			start.ClockMs = t0.UnixMilli()
			tr := NewTracker(start, tc.maxHoles, time.Hour, time.Time{})
			ab, err := tr.Advance(tc.ids, time.Time{})
			if (err != nil) != tc.err {
				t.Fatalf("err = %v, want error %v", err, tc.err)
			}
			got := tr.Position()
			if got.High != tc.want.High || len(got.Holes) != len(tc.want.Holes) ||
				(len(got.Holes) > 0 && !reflect.DeepEqual(got.Holes, tc.want.Holes)) {
				t.Fatalf("position = %+v, want %+v", got, tc.want)
			}
			if !reflect.DeepEqual(ab, tc.abandoned) {
				t.Fatalf("abandoned = %+v, want %+v", ab, tc.abandoned)
			}
		})
	}
}

// TestMaxOutboxIDRoundTrips pins the bound Advance enforces: with High at
// MaxOutboxID the highest possible hole, 2^63-1 above the range before it,
// survives the position encoding; one id more is an *IDRangeError.
func TestMaxOutboxIDRoundTrips(t *testing.T) {
	clock := int64(1_000_000)
	tr := NewTracker(Position{ClockMs: clock}, 1, time.Hour, time.Time{})
	if _, err := tr.Advance([]uint64{MaxOutboxID}, time.Time{}); err != nil {
		t.Fatal(err)
	}
	got, err := DecodePosition(tr.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if want := holes(clock, MaxOutboxID-1); got.High != MaxOutboxID || !reflect.DeepEqual(got.Holes, want) {
		t.Fatalf("decoded High %d holes %+v, want %d %+v", got.High, got.Holes, uint64(MaxOutboxID), want)
	}
	tr = NewTracker(Position{ClockMs: clock}, 1, time.Hour, time.Time{})
	var re *IDRangeError
	if _, err := tr.Advance([]uint64{MaxOutboxID + 1}, time.Time{}); !errors.As(err, &re) || re.ID != MaxOutboxID+1 {
		t.Fatalf("Advance(MaxOutboxID+1) = %v, want *IDRangeError", err)
	}
	if tr.High() != 0 {
		t.Fatalf("a refused scan moved High to %d", tr.High())
	}
}

func TestTrackerFillAndExpire(t *testing.T) {
	t0 := time.UnixMilli(10_000_000)
	tr := NewTracker(Position{High: 100, ClockMs: t0.UnixMilli(), Holes: []Hole{
		{ID: 3, FirstSeenMs: t0.Add(-2 * time.Hour).UnixMilli()},
		{ID: 4, FirstSeenMs: t0.Add(-2 * time.Hour).UnixMilli()},
		{ID: 7, FirstSeenMs: t0.Add(-2 * time.Hour).UnixMilli()},
		{ID: 50, FirstSeenMs: t0.Add(-time.Minute).UnixMilli()},
		{ID: 60, FirstSeenMs: t0.UnixMilli()},
	}}, 100, time.Hour, t0)
	if n := tr.Fill([]uint64{4, 60, 99}); n != 2 {
		t.Fatalf("Fill = %d, want 2 (99 is no hole)", n)
	}
	if got := appendIDs(nil, tr.Position().Holes); !reflect.DeepEqual(got, []uint64{3, 7, 50}) {
		t.Fatalf("holes = %v", got)
	}
	ab := tr.Expire(t0)
	want := []Abandoned{
		{From: 3, To: 3, Reason: AbandonMaxAge, OpenFor: 2 * time.Hour},
		{From: 7, To: 7, Reason: AbandonMaxAge, OpenFor: 2 * time.Hour},
	}
	if !reflect.DeepEqual(ab, want) {
		t.Fatalf("Expire = %+v, want %+v", ab, want)
	}
	if got := appendIDs(nil, tr.Position().Holes); !reflect.DeepEqual(got, []uint64{50}) {
		t.Fatalf("holes after expire = %v", got)
	}
	if ab := tr.Expire(t0); ab != nil {
		t.Fatalf("second Expire = %+v", ab)
	}
	if ab := tr.Expire(t0.Add(time.Hour)); len(ab) != 1 || ab[0].From != 50 {
		t.Fatalf("late Expire = %+v", ab)
	}
	if tr.OpenHoles() != 0 || tr.High() != 100 {
		t.Fatalf("end state %+v", tr.Position())
	}
}

// TestExpireKeepsFoundHoles: the ids Expire is told to keep (rows a read
// found and left for the next batch) stay open, aged exactly gap_max_age,
// while the other expired holes go; across blocks the position still
// encodes to what the tracker holds.
func TestExpireKeepsFoundHoles(t *testing.T) {
	t0 := time.UnixMilli(10_000_000)
	old := t0.Add(-2 * time.Hour).UnixMilli()
	tr := NewTracker(Position{High: 100, ClockMs: t0.UnixMilli(), Holes: []Hole{
		{ID: 3, FirstSeenMs: old}, {ID: 4, FirstSeenMs: old}, {ID: 5, FirstSeenMs: old}, {ID: 7, FirstSeenMs: old},
		{ID: 50, FirstSeenMs: t0.Add(-time.Minute).UnixMilli()},
	}}, 100, time.Hour, t0)
	ab := tr.Expire(t0, 4, 7, 50)
	want := []Abandoned{
		{From: 3, To: 3, Reason: AbandonMaxAge, OpenFor: 2 * time.Hour},
		{From: 5, To: 5, Reason: AbandonMaxAge, OpenFor: 2 * time.Hour},
	}
	if !reflect.DeepEqual(ab, want) {
		t.Fatalf("Expire = %+v, want %+v", ab, want)
	}
	limit := t0.Add(-time.Hour).UnixMilli()
	wantHoles := []Hole{{ID: 4, FirstSeenMs: limit}, {ID: 7, FirstSeenMs: limit}, {ID: 50, FirstSeenMs: t0.Add(-time.Minute).UnixMilli()}}
	if got := tr.Position().Holes; !reflect.DeepEqual(got, wantHoles) {
		t.Fatalf("holes = %+v, want %+v", got, wantHoles)
	}
	late := time.Hour + time.Millisecond
	want = []Abandoned{{From: 4, To: 4, Reason: AbandonMaxAge, OpenFor: late}, {From: 7, To: 7, Reason: AbandonMaxAge, OpenFor: late}}
	if ab := tr.Expire(t0.Add(time.Millisecond)); !reflect.DeepEqual(ab, want) {
		t.Fatalf("Expire without keep = %+v, want %+v", ab, want)
	}

	// Thousands of expired holes over several blocks, a few kept.
	var hs []Hole
	for id := uint64(1); id <= 3*blockHoles; id++ {
		hs = append(hs, Hole{ID: 2 * id, FirstSeenMs: old})
	}
	tr = NewTracker(Position{High: 10 * blockHoles, ClockMs: t0.UnixMilli(), Holes: hs}, 10*blockHoles, time.Hour, t0)
	keep := []uint64{2, 2 * blockHoles, 2*blockHoles + 2, 6 * blockHoles}
	ab = tr.Expire(t0, keep...)
	gone := 0
	for _, a := range ab {
		gone += int(a.Count())
	}
	if gone != 3*blockHoles-len(keep) {
		t.Fatalf("%d ids given up, want %d", gone, 3*blockHoles-len(keep))
	}
	if got := appendIDs(nil, tr.Position().Holes); !reflect.DeepEqual(got, keep) || tr.OpenHoles() != len(keep) {
		t.Fatalf("open holes %v (%d), want %v", got, tr.OpenHoles(), keep)
	}
	got, err := DecodePosition(tr.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Holes, tr.Position().Holes) {
		t.Fatalf("decoded holes %+v, want %+v", got.Holes, tr.Position().Holes)
	}
}

func TestRunsGroupsConsecutive(t *testing.T) {
	got := appendRuns(nil, []Hole{{ID: 1, FirstSeenMs: 9}, {ID: 2}, {ID: 3}, {ID: 5, FirstSeenMs: 7}}, AbandonMaxAge, 10)
	want := []Abandoned{{From: 1, To: 3, Reason: AbandonMaxAge, OpenFor: time.Millisecond}, {From: 5, To: 5, Reason: AbandonMaxAge, OpenFor: 3 * time.Millisecond}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("runs = %+v", got)
	}
	if got[0].Count() != 3 {
		t.Fatalf("count = %d", got[0].Count())
	}
}
