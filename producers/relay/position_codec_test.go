package relay

import (
	"database/sql"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/schemas/envelope"
)

func TestPositionCodec(t *testing.T) {
	big := Position{High: 10_000_000, ClockMs: 1_800_000}
	for i := uint64(0); i < 100_000; i++ {
		big.Holes = append(big.Holes, Hole{ID: 1 + i*50, FirstSeenMs: 1_000_000 + int64(i/7)})
	}
	ranges := Position{High: 500, ClockMs: 99, Holes: append(holes(5, 10, 11, 12, 13), append(holes(6, 14, 15), holes(9, 40)...)...)}
	for _, p := range []Position{
		{},
		{High: 42, ClockMs: 7, Holes: []Hole{}},
		{High: 1 << 62, ClockMs: 1 << 40, Holes: []Hole{{ID: 1, FirstSeenMs: 0}, {ID: 1 << 61, FirstSeenMs: 1 << 40}}},
		ranges,
		big,
	} {
		b := EncodePosition(p)
		if b[0] != positionVersion2 {
			t.Fatalf("poll position version byte %d, want %d (a relay before version 3 must read it)", b[0], positionVersion2)
		}
		got, err := DecodePosition(b)
		if err != nil {
			t.Fatalf("decode %d holes: %v", len(p.Holes), err)
		}
		if got.High != p.High || got.ClockMs != p.ClockMs || len(got.Holes) != len(p.Holes) ||
			(len(p.Holes) > 0 && !reflect.DeepEqual(got.Holes, p.Holes)) {
			t.Fatalf("round trip of %d holes differs", len(p.Holes))
		}
	}
	// 10..13 at 5, 14..15 at 6, 40 at 9: three ranges, two of them runs.
	if n := len(EncodePosition(ranges)); n > 16 {
		t.Errorf("7 holes in 3 ranges encode to %d bytes", n)
	}
	if n, limit := len(EncodePosition(big)), MaxPositionBytes(100_000, time.Hour); n > limit {
		t.Fatalf("100k holes encode to %d bytes, above the worst case %d", n, limit)
	}
	valid := EncodePosition(Position{High: 9, ClockMs: 5, Holes: holes(1, 3, 5)})
	for name, b := range map[string][]byte{
		"empty":             nil,
		"version":           {9, 1, 0},
		"truncated":         valid[:len(valid)-1],
		"trailing":          append(append([]byte(nil), valid...), 0),
		"hole above high":   EncodePosition(Position{High: 2, ClockMs: 5, Holes: holes(1, 3)}),
		"seen after clock":  EncodePosition(Position{High: 9, ClockMs: 0, Holes: holes(1, 3)}),
		"zero id":           EncodePosition(Position{High: 9, ClockMs: 5, Holes: holes(1, 0)}),
		"huge range count":  {2, 5, 0, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"huge range":        {2, 0xff, 0xff, 0xff, 0xff, 0x0f, 0, 1, 3, 0xff, 0xff, 0xff, 0xff, 0x0f, 0},
		"v1 huge count":     {1, 5, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"v1 duplicate hole": {1, 9, 2, 3, 2, 0, 2},
	} {
		if _, err := DecodePosition(b); !errors.Is(err, ErrBadPosition) {
			t.Errorf("%s: err = %v, want ErrBadPosition", name, err)
		}
	}
	if _, err := DecodePosition([]byte{9, 1, 0}); !errors.Is(err, envelope.ErrNewerVersion) {
		t.Errorf("version 9: err = %v, want a VersionError", err)
	}
}

// TestPositionDecodesVersion1: testdata/position_v1.bin was written by
// the version 1 encoder (before position clocks): holes 3, 4, 7, 900000
// and 1000000 first seen at wall-clock ms 1_700_000_000_000, the same,
// +1000, +500 (a clock step back) and +5000. It must still decode, with
// ages measured on the writer's clock and never overstated.
func TestPositionDecodesVersion1(t *testing.T) {
	b, err := os.ReadFile("testdata/position_v1.bin")
	if err != nil {
		t.Fatal(err)
	}
	p, err := DecodePosition(b)
	if err != nil {
		t.Fatal(err)
	}
	const t0 = 1_700_000_000_000
	want := Position{High: 1_000_050, ClockMs: t0 + 5000, Holes: []Hole{
		{ID: 3, FirstSeenMs: t0}, {ID: 4, FirstSeenMs: t0}, {ID: 7, FirstSeenMs: t0 + 1000},
		{ID: 900_000, FirstSeenMs: t0 + 1000}, // raised to its predecessor's time: younger, never older
		{ID: 1_000_000, FirstSeenMs: t0 + 5000},
	}}
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("decoded %+v, want %+v", p, want)
	}
	// A leader restoring it with a wall clock years later sees the ages
	// the writer's clock gave them: the oldest hole is 5s old.
	tr := NewTracker(p, 100, 6*time.Second, time.Now())
	if ab := tr.Expire(time.Now()); len(ab) != 0 {
		t.Fatalf("restored version 1 holes abandoned at once: %+v", ab)
	}
	if got, _ := DecodePosition(tr.Encode()); got.Holes[0].FirstSeenMs != t0 || got.ClockMs < t0+5000 {
		t.Fatalf("re-encoded as version 2: %+v", got)
	}
}

// TestGapAgeIgnoresWallClock: a position written by a leader whose wall
// clock is hours behind (or ahead) ages its holes by the time they were
// actually open, not by the skew. Fails on the version 1 scheme, where
// first-seen was the writer's wall clock and the reader's wall clock aged it.
func TestGapAgeIgnoresWallClock(t *testing.T) {
	for _, skew := range []time.Duration{-5 * time.Hour, 5 * time.Hour} {
		real := time.Now()
		a := NewTracker(Position{}, 100, time.Minute, real.Add(skew))
		if _, err := a.Advance([]uint64{1, 3}, real.Add(skew).Add(10*time.Second)); err != nil {
			t.Fatal(err)
		}
		restored, err := DecodePosition(a.Encode())
		if err != nil {
			t.Fatal(err)
		}
		// The new leader takes over 20s later by its own, correct, clock.
		b := NewTracker(restored, 100, time.Minute, real.Add(30*time.Second))
		if ab := b.Expire(real.Add(30 * time.Second)); len(ab) != 0 {
			t.Fatalf("skew %s: hole abandoned at takeover: %+v", skew, ab)
		}
		if ab := b.Expire(real.Add(80 * time.Second)); len(ab) != 0 {
			t.Fatalf("skew %s: hole open 50s of leadership abandoned before gap_max_age 1m: %+v", skew, ab)
		}
		ab := b.Expire(real.Add(95 * time.Second))
		if len(ab) != 1 || ab[0].From != 2 || ab[0].OpenFor != time.Minute+5*time.Second {
			t.Fatalf("skew %s: after 65s of leadership: %+v, want hole 2 abandoned, open 1m5s", skew, ab)
		}
	}
}

// TestMaxPositionBytesBoundsWorstCase: random positions shaped to be
// large (every hole its own range, ids far apart, distinct times within
// the max age) never encode above MaxPositionBytes, and the bound is not
// loose by more than a few percent for the shape it assumes.
func TestMaxPositionBytesBoundsWorstCase(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	const n = 20_000
	maxAge := time.Hour
	for trial := range 5 {
		p := Position{ClockMs: 1 << 42}
		id := uint64(0)
		step := uint64(1) << (37 + trial*3) // up to ids spread evenly to 2^64
		if trial == 4 {
			step = 2 * (math.MaxUint64 / n) // the worst case the bound assumes
		}
		seen := p.ClockMs - maxAge.Milliseconds()
		for range n {
			next := id + 2 + rnd.Uint64N(step-2)
			if next < id {
				t.Fatalf("trial %d overflows", trial)
			}
			id = next
			seen += rnd.Int64N(2 * maxAge.Milliseconds() / n)
			p.Holes = append(p.Holes, Hole{ID: id, FirstSeenMs: min(seen, p.ClockMs)})
		}
		p.High = id
		got, bound := len(EncodePosition(p)), MaxPositionBytes(n, maxAge)
		if got > bound {
			t.Fatalf("trial %d: %d bytes above the bound %d", trial, got, bound)
		}
		t.Logf("trial %d: %d holes, ids to 2^%d: %d bytes, bound %d", trial, n, 64-clz(id), got, bound)
	}
	if lim := MaxOpenGapsFor("roomflow-relay", time.Hour); lim < 100_000 {
		t.Fatalf("default relay.max_open_gaps 100000 does not fit (limit %d)", lim)
	}
}

// nilDB is a handle that is never used: New does not connect.
func nilDB(t *testing.T) *sql.DB {
	db, err := sql.Open("mysql", "root@tcp(127.0.0.1:1)/unused")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func clz(v uint64) int {
	n := 0
	for v&(1<<63) == 0 && n < 64 {
		v <<= 1
		n++
	}
	return n
}

// TestNewRejectsOpenGapsThatCannotFit: a MaxOpenGaps whose
// worst-case position exceeds a Kafka record is refused at start, naming
// the key (max_open_gaps). A relay that accepted a million would fail every commit once
// about 500k gaps are open.
func TestNewRejectsOpenGapsThatCannotFit(t *testing.T) {
	cfg := Config{TransactionalID: "roomflow-relay", Topic: "events", DLQTopic: "dlq", OffsetsTopic: "offsets",
		Kafka: kafkax.Cluster{Brokers: []string{"127.0.0.1:1"}}}
	cfg.MaxOpenGaps = 1_000_000
	_, err := New(cfg, nilDB(t))
	var fe *cfgerr.FieldError
	if !errors.As(err, &fe) || fe.Key != "max_open_gaps" {
		t.Fatalf("New with 1,000,000 open gaps: %v, want a max_open_gaps field error", err)
	}
	t.Log(err)
	cfg.MaxOpenGaps = MaxOpenGapsFor(cfg.TransactionalID, DefaultGapMaxAge)
	if _, err := New(cfg, nilDB(t)); err != nil {
		t.Fatalf("New at the limit %d: %v", cfg.MaxOpenGaps, err)
	}
}

// BenchmarkBatchGaps measures what a batch costs the Tracker with 1k,
// 10k and 100k open gaps (isolated ids, the worst case for the encoding):
// encoding the position when no hole changed, when a hole was filled, one
// opened and one expired, and choosing the ids to probe. Tracker work is
// the same at every size; what grows is copying the cached encoding into
// the record value (a few bytes per gap, the record's own size).
func BenchmarkBatchGaps(b *testing.B) {
	for _, gaps := range []int{1_000, 10_000, 100_000} {
		p := Position{High: uint64(gaps) * 50, ClockMs: 1 << 30}
		for i := range gaps {
			p.Holes = append(p.Holes, Hole{ID: 1 + uint64(i)*50, FirstSeenMs: 1<<30 - int64(gaps) + int64(i)})
		}
		now := time.Now()
		b.Run(fmt.Sprintf("gaps=%d/encode-unchanged", gaps), func(b *testing.B) {
			tr := NewTracker(p, 200_000, time.Hour, now)
			tr.Encode()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tr.Advance([]uint64{tr.High() + 1}, now); err != nil {
					b.Fatal(err)
				}
				tr.Expire(now)
				tr.Encode()
			}
		})
		b.Run(fmt.Sprintf("gaps=%d/encode-after-fill-open-expire", gaps), func(b *testing.B) {
			tr := NewTracker(p, 200_000, time.Hour, now)
			tr.Encode()
			ids := appendIDs(nil, p.Holes)
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				// A late row fills an old hole, the scan opens a new one,
				// and the oldest expires: every batch changes the holes.
				tr.Fill([]uint64{ids[(len(ids)/2+i)%len(ids)]})
				i++
				if _, err := tr.Advance([]uint64{tr.High() + 2}, now); err != nil {
					b.Fatal(err)
				}
				tr.Expire(now.Add(time.Hour - time.Duration(gaps)*time.Millisecond + time.Duration(i)*time.Millisecond))
				tr.Encode()
			}
		})
		b.Run(fmt.Sprintf("gaps=%d/probe-ids", gaps), func(b *testing.B) {
			tr := NewTracker(p, 200_000, time.Hour, now)
			b.ReportAllocs()
			for b.Loop() {
				if n := len(tr.ProbeIDs(probeLimit)); n != min(probeLimit, gaps) {
					b.Fatalf("probed %d", n)
				}
			}
		})
	}
}

func TestProbeIDsBoundedAndCovering(t *testing.T) {
	var p Position
	for i := uint64(1); i <= 10_000; i++ {
		p.Holes = append(p.Holes, Hole{ID: i * 2, FirstSeenMs: int64(i)})
	}
	p.High, p.ClockMs = 20_001, 10_000
	tr := NewTracker(p, 20_000, time.Hour, time.Now())
	seen := map[uint64]int{}
	for range 4 {
		ids := tr.ProbeIDs(4000)
		if len(ids) != 4000 {
			t.Fatalf("probe of %d ids, want 4000", len(ids))
		}
		for i, id := range ids {
			if i > 0 && id <= ids[i-1] {
				t.Fatalf("probe not ascending at %d", i)
			}
			seen[id]++
		}
	}
	if len(seen) != 10_000 {
		t.Fatalf("four probes covered %d of 10000 holes", len(seen))
	}
	if seen[20_000] != 4 {
		t.Fatalf("youngest hole probed %d times, want every probe", seen[20_000])
	}
}

// TestTrackerEncodeMatchesPosition: after any sequence of opens, fills,
// evictions and expiries the Tracker's block-cached encoding decodes to
// exactly its position.
func TestTrackerEncodeMatchesPosition(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	start := time.Now()
	tr := NewTracker(Position{}, 5000, time.Minute, start)
	now := start
	for step := range 3000 {
		now = now.Add(time.Duration(rnd.IntN(200)) * time.Millisecond)
		switch op := rnd.IntN(10); {
		case op < 5: // a scan with skipped ids
			var ids []uint64
			id := tr.High()
			for range rnd.IntN(20) {
				id += 1 + uint64(rnd.IntN(4))
				if rnd.IntN(50) == 0 {
					id += uint64(rnd.IntN(3000)) // a jump: a long run of holes
				}
				ids = append(ids, id)
			}
			if _, err := tr.Advance(ids, now); err != nil {
				t.Fatal(err)
			}
		case op < 9: // late rows fill some holes
			p := tr.Position()
			var ids []uint64
			for range rnd.IntN(30) {
				if len(p.Holes) > 0 {
					ids = append(ids, p.Holes[rnd.IntN(len(p.Holes))].ID)
				}
			}
			slices.Sort(ids)
			tr.Fill(slices.Compact(ids))
		default:
			tr.Expire(now)
		}
		want := tr.Position()
		got, err := DecodePosition(tr.Encode())
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if got.High != want.High || got.ClockMs != want.ClockMs || len(got.Holes) != len(want.Holes) ||
			(len(want.Holes) > 0 && !reflect.DeepEqual(got.Holes, want.Holes)) || tr.OpenHoles() != len(want.Holes) {
			t.Fatalf("step %d: encoding decodes to %d holes, tracker has %d (open %d)", step, len(got.Holes), len(want.Holes), tr.OpenHoles())
		}
	}
	t.Logf("end: %d open holes, high %d", tr.OpenHoles(), tr.High())
}
