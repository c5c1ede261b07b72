package relay

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"
)

// Hole is an outbox id below the high-water mark that has not been seen yet:
// either its inserting transaction is still open (InnoDB allocates the
// auto-increment id at insert time, so a slow transaction commits a lower id
// after higher ones), or it was rolled back and the id will never appear.
type Hole struct {
	ID uint64
	// FirstSeenMs is when the relay first noticed the id missing, on the
	// position clock (Position.ClockMs), never on a host's wall clock; the
	// hole is abandoned once it is older than relay.gap_max_age.
	FirstSeenMs int64
}

// Position is how far the relay has come: every id <= High is relayed,
// except the open Holes (ascending by ID), which are relayed when they
// appear. It is stored in the relay offsets topic in the same Kafka
// transaction as the records it covers, so it can never disagree with them.
type Position struct {
	High uint64
	// ClockMs is the position clock: milliseconds of leadership, advanced
	// by each leader with its own monotonic clock from the value it
	// restored. Hole ages are differences on this clock, so a new leader
	// whose wall clock is hours ahead of (or behind) the old one's ages no
	// hole by the skew; the time between two leaders is not counted, which
	// can only make a hole wait longer, never be given up early.
	ClockMs int64
	Holes   []Hole
}

// Clone returns a deep copy.
func (p Position) Clone() Position {
	return Position{High: p.High, ClockMs: p.ClockMs, Holes: append([]Hole(nil), p.Holes...)}
}

// AbandonReason says why a hole was given up.
type AbandonReason string

const (
	// AbandonMaxAge: the hole stayed open longer than relay.gap_max_age.
	AbandonMaxAge AbandonReason = "max_age"
	// AbandonMaxOpenGaps: relay.max_open_gaps holes were open already and
	// this, the oldest, made room for a newer one.
	AbandonMaxOpenGaps AbandonReason = "max_open_gaps"
)

// Abandoned is a run of consecutive ids given up for one reason.
type Abandoned struct {
	From, To uint64 // inclusive
	Reason   AbandonReason
	OpenFor  time.Duration // how long From was waited for (position clock)
}

// Count is the number of ids in the run.
func (a Abandoned) Count() uint64 { return a.To - a.From + 1 }

// Tracker is the pure gap-tracking state machine: it turns the ids a scan
// returned into a new Position, remembering skipped ids as holes, and
// enforces the age and count bounds. It does no I/O and reads no clock;
// callers pass their (monotonic) time in, so it is table-tested.
//
// Holes are kept ascending by id with FirstSeenMs non-decreasing: new holes
// are always above every open one and the position clock never goes back.
// So the lowest id is also the oldest, both bounds trim from the front, and
// expiry costs the holes it removes, not the holes that stay.
//
// Per-batch cost does not grow with the open holes where it can be helped:
// the holes' encoding is cached while they do not change (Encode),
// ProbeIDs hands out a bounded slice of them, and Fill is a binary search
// per filled id.
type Tracker struct {
	pos      Position
	maxHoles int
	maxAge   time.Duration
	start    time.Time // the leader's clock when the position was restored
	base     int64     // pos.ClockMs at start
	body     []byte    // cached encoding of pos.Holes; nil when stale
	cursor   uint64    // the next older hole id ProbeIDs hands out
}

// NewTracker starts from a restored position at the leader's time now.
// maxHoles < 1 is treated as 1.
func NewTracker(p Position, maxHoles int, maxAge time.Duration, now time.Time) *Tracker {
	if maxHoles < 1 {
		maxHoles = 1
	}
	return &Tracker{pos: p.Clone(), maxHoles: maxHoles, maxAge: maxAge, start: now, base: p.ClockMs}
}

// tick moves the position clock to now and returns it.
func (t *Tracker) tick(now time.Time) int64 {
	if c := t.base + now.Sub(t.start).Milliseconds(); c > t.pos.ClockMs {
		t.pos.ClockMs = c
	}
	return t.pos.ClockMs
}

// Position returns a copy of the current position.
func (t *Tracker) Position() Position { return t.pos.Clone() }

// High is the high-water id.
func (t *Tracker) High() uint64 { return t.pos.High }

// OpenHoles is the number of open holes.
func (t *Tracker) OpenHoles() int { return len(t.pos.Holes) }

// ProbeIDs returns at most limit open hole ids to look up, ascending: all
// of them when they fit; otherwise the youngest quarter of limit (a late
// commit usually lands within seconds) and the rest taken round-robin from
// the older holes, so each older hole is looked up once every
// open/limit probes. A probe's cost is bounded by limit, not by how many
// holes are open.
func (t *Tracker) ProbeIDs(limit int) []uint64 {
	hs := t.pos.Holes
	if len(hs) <= limit {
		return holeIDs(hs)
	}
	young := limit / 4
	old := hs[:len(hs)-young]
	i := sort.Search(len(old), func(i int) bool { return old[i].ID >= t.cursor })
	if i == len(old) {
		i = 0
	}
	n := limit - young
	picked := old[i:min(len(old), i+n)]
	ids := holeIDs(picked)
	if rest := n - len(picked); rest > 0 { // wrap around
		ids = append(holeIDs(old[:min(rest, i)]), ids...)
	}
	t.cursor = picked[len(picked)-1].ID + 1
	return append(ids, holeIDs(hs[len(hs)-young:])...)
}

func holeIDs(hs []Hole) []uint64 {
	ids := make([]uint64, len(hs))
	for i, h := range hs {
		ids[i] = h.ID
	}
	return ids
}

// Advance records a scan of ids strictly above High, ascending (as
// `WHERE id > High ORDER BY id` returns them): every id skipped between
// them becomes a hole first seen now, and High moves to the last id.
// If more than maxHoles holes would be open, the oldest are abandoned and
// returned. Ids not above High or not ascending are a caller bug and are
// reported as an error without changing the state.
func (t *Tracker) Advance(ids []uint64, now time.Time) ([]Abandoned, error) {
	prev := t.pos.High
	for _, id := range ids {
		if id <= prev {
			return nil, fmt.Errorf("relay: scan returned id %d not above %d", id, prev)
		}
		prev = id
	}
	clock := t.tick(now)
	var out []Abandoned
	prev = t.pos.High
	for _, id := range ids {
		if id > prev+1 {
			out = append(out, t.addRange(prev+1, id-1, clock)...)
		}
		prev = id
	}
	t.pos.High = prev
	return out, nil
}

// addRange opens holes from..to, abandoning the oldest beyond maxHoles. A
// range wider than maxHoles abandons its lower part at once without ever
// materialising it, so a huge id jump costs no memory.
func (t *Tracker) addRange(from, to uint64, clock int64) []Abandoned {
	t.body = nil
	var out []Abandoned
	if n := to - from + 1; n > uint64(t.maxHoles) {
		cut := to - uint64(t.maxHoles) // abandon from..cut
		out = append(out, Abandoned{From: from, To: cut, Reason: AbandonMaxOpenGaps})
		from = cut + 1
	}
	need := len(t.pos.Holes) + int(to-from+1) - t.maxHoles
	if need > 0 {
		out = append(out, runs(t.pos.Holes[:need], AbandonMaxOpenGaps, clock)...)
		t.pos.Holes = append(t.pos.Holes[:0:0], t.pos.Holes[need:]...)
	}
	for id := from; id <= to; id++ {
		t.pos.Holes = append(t.pos.Holes, Hole{ID: id, FirstSeenMs: clock})
		if id == to { // guards overflow at MaxUint64
			break
		}
	}
	return out
}

// Fill closes the holes whose rows appeared (found by the hole query) and
// returns how many were open. Ids that are not open holes are ignored.
func (t *Tracker) Fill(ids []uint64) int {
	hs := t.pos.Holes
	first := len(hs)
	gone := make(map[int]bool, len(ids))
	for _, id := range ids {
		i := sort.Search(len(hs), func(i int) bool { return hs[i].ID >= id })
		if i < len(hs) && hs[i].ID == id {
			gone[i] = true
			first = min(first, i)
		}
	}
	if len(gone) == 0 {
		return 0
	}
	kept := hs[:first]
	for i := first; i < len(hs); i++ {
		if !gone[i] {
			kept = append(kept, hs[i])
		}
	}
	t.pos.Holes = kept
	t.body = nil
	return len(gone)
}

// Expire abandons every hole first seen more than maxAge before now.
func (t *Tracker) Expire(now time.Time) []Abandoned {
	clock := t.tick(now)
	if t.maxAge <= 0 {
		return nil
	}
	limit := clock - t.maxAge.Milliseconds()
	n := sort.Search(len(t.pos.Holes), func(i int) bool { return t.pos.Holes[i].FirstSeenMs >= limit })
	if n == 0 {
		return nil
	}
	out := runs(t.pos.Holes[:n], AbandonMaxAge, clock)
	t.pos.Holes = t.pos.Holes[n:]
	t.body = nil
	return out
}

// runs groups ascending holes into runs of consecutive ids.
func runs(hs []Hole, reason AbandonReason, clock int64) []Abandoned {
	var out []Abandoned
	for _, h := range hs {
		if n := len(out); n > 0 && out[n-1].To+1 == h.ID {
			out[n-1].To = h.ID
			continue
		}
		out = append(out, Abandoned{From: h.ID, To: h.ID, Reason: reason,
			OpenFor: time.Duration(clock-h.FirstSeenMs) * time.Millisecond})
	}
	return out
}

// Encode returns the encoded current position (see EncodePosition). The
// holes' part is cached until they change, so a batch that opens, fills
// or gives up no hole does not re-encode them.
func (t *Tracker) Encode() []byte {
	if t.body == nil {
		t.body = appendHoles(make([]byte, 0, 16+4*len(t.pos.Holes)), t.pos.Holes)
	}
	return append(appendHeader(make([]byte, 0, 32+len(t.body)), t.pos), t.body...)
}

// Position record encoding: the value of the relay offsets topic record
// whose key is relay.transactional_id. The first byte is the version.
//
// Version 2 (written since roomflow gained relay.max_batch_bytes):
//
//	byte    2
//	uvarint high
//	uvarint clock_ms (Position.ClockMs)
//	uvarint number of ranges
//	per range of consecutive hole ids first seen at the same clock ms,
//	ascending: uvarint (first id - previous range's last id, from 0) << 1 | multi,
//	           if multi: uvarint number of ids - 2,
//	           uvarint first-seen ms - previous range's (first: absolute)
//
// Version 1 (roomflow before it): byte 1, uvarint high, uvarint number of
// holes, per hole uvarint id delta and zig-zag varint first-seen delta, in
// the leader's wall-clock ms. Decoding it takes the newest first-seen as
// the position clock, so version 1 ages are measured on the writer's own
// clock too (under-stated by the time from the newest hole to the commit:
// later, never earlier), and makes first-seen non-decreasing by raising,
// never lowering, an older-looking hole's time.
//
// Compatibility rule: a reader decodes every version up to its own; a
// writer writes only the newest it knows; a version is never changed once
// released, a new form (such as a binlog GTID set) takes a new number. A
// reader that meets a higher version stops with ErrBadPosition instead of
// guessing, so roll relays forward, not back, across a format change (an
// older relay cannot read what a newer one wrote).
const positionVersion = 2

const positionVersion1 = 1

// ErrBadPosition is returned for a position record that does not decode.
var ErrBadPosition = errors.New("relay: malformed position record")

// maxDecodedHoles bounds what a (corrupt) position may make the decoder
// allocate; MaxOpenGapsFor never allows more open holes than this.
const maxDecodedHoles = 1 << 21

// EncodePosition serialises p (version 2); holes must be ascending by id
// with non-decreasing FirstSeenMs, as a Tracker keeps them.
func EncodePosition(p Position) []byte {
	return appendHoles(appendHeader(nil, p), p.Holes)
}

func appendHeader(b []byte, p Position) []byte {
	b = append(b, positionVersion)
	b = binary.AppendUvarint(b, p.High)
	return binary.AppendUvarint(b, uint64(max(p.ClockMs, 0)))
}

func appendHoles(b []byte, hs []Hole) []byte {
	n := 0
	for i := range hs {
		if i == 0 || hs[i].ID != hs[i-1].ID+1 || hs[i].FirstSeenMs != hs[i-1].FirstSeenMs {
			n++
		}
	}
	b = binary.AppendUvarint(b, uint64(n))
	var prevEnd uint64
	var prevSeen int64
	for i := 0; i < len(hs); {
		j := i + 1
		for j < len(hs) && hs[j].ID == hs[j-1].ID+1 && hs[j].FirstSeenMs == hs[i].FirstSeenMs {
			j++
		}
		multi := uint64(0)
		if j-i > 1 {
			multi = 1
		}
		b = binary.AppendUvarint(b, (hs[i].ID-prevEnd)<<1|multi)
		if multi == 1 {
			b = binary.AppendUvarint(b, uint64(j-i-2))
		}
		b = binary.AppendUvarint(b, uint64(hs[i].FirstSeenMs-prevSeen))
		prevEnd, prevSeen = hs[j-1].ID, hs[i].FirstSeenMs
		i = j
	}
	return b
}

// DecodePosition parses a value written by EncodePosition, of any version
// up to positionVersion.
func DecodePosition(b []byte) (Position, error) {
	if len(b) == 0 {
		return Position{}, fmt.Errorf("%w: empty", ErrBadPosition)
	}
	d := decoder{b: b[1:]}
	var p Position
	var err error
	switch b[0] {
	case positionVersion1:
		p, err = d.v1()
	case positionVersion:
		p, err = d.v2()
	default:
		return Position{}, fmt.Errorf("%w: unknown version %d", ErrBadPosition, b[0])
	}
	if err != nil {
		return Position{}, err
	}
	if len(d.b) != 0 {
		return Position{}, fmt.Errorf("%w: trailing bytes", ErrBadPosition)
	}
	return p, nil
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = fmt.Errorf("%w: %s", ErrBadPosition, what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint(what string) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = fmt.Errorf("%w: %s", ErrBadPosition, what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) v2() (Position, error) {
	var p Position
	p.High = d.uvarint("high")
	clock := d.uvarint("clock")
	ranges := d.uvarint("range count")
	if d.err != nil {
		return Position{}, d.err
	}
	if clock > math.MaxInt64 || ranges > uint64(len(d.b)) { // every range takes at least 2 bytes
		return Position{}, fmt.Errorf("%w: header", ErrBadPosition)
	}
	p.ClockMs = int64(clock)
	p.Holes = make([]Hole, 0, ranges)
	var end uint64
	var seen int64
	for i := uint64(0); i < ranges; i++ {
		tok := d.uvarint("range")
		count := uint64(1)
		if tok&1 == 1 {
			count = d.uvarint("range length") + 2
		}
		ds := d.uvarint("range time")
		if d.err != nil {
			return Position{}, d.err
		}
		delta := tok >> 1
		first := end + delta
		if delta == 0 || first < end || count > p.High || first > p.High-count+1 {
			return Position{}, fmt.Errorf("%w: range %d out of order", ErrBadPosition, i)
		}
		if ds > uint64(p.ClockMs-seen) {
			return Position{}, fmt.Errorf("%w: range %d seen after the clock", ErrBadPosition, i)
		}
		if uint64(len(p.Holes))+count > maxDecodedHoles {
			return Position{}, fmt.Errorf("%w: more than %d holes", ErrBadPosition, maxDecodedHoles)
		}
		seen += int64(ds)
		for id := first; id < first+count; id++ {
			p.Holes = append(p.Holes, Hole{ID: id, FirstSeenMs: seen})
		}
		end = first + count - 1
	}
	return p, nil
}

func (d *decoder) v1() (Position, error) {
	var p Position
	p.High = d.uvarint("high")
	count := d.uvarint("hole count")
	if d.err != nil {
		return Position{}, d.err
	}
	if count > uint64(len(d.b)) || count > maxDecodedHoles { // every hole takes at least 2 bytes
		return Position{}, fmt.Errorf("%w: hole count", ErrBadPosition)
	}
	p.Holes = make([]Hole, 0, count)
	var id uint64
	var seen int64
	for i := uint64(0); i < count; i++ {
		delta := d.uvarint("hole")
		seen += d.varint("hole time")
		if d.err != nil {
			return Position{}, fmt.Errorf("%w (hole %d)", d.err, i)
		}
		id += delta
		if (i > 0 && delta == 0) || id > p.High {
			return Position{}, fmt.Errorf("%w: hole %d out of order", ErrBadPosition, i)
		}
		h := Hole{ID: id, FirstSeenMs: seen}
		if n := len(p.Holes); n > 0 {
			h.FirstSeenMs = max(h.FirstSeenMs, p.Holes[n-1].FirstSeenMs)
		}
		p.Holes = append(p.Holes, h)
	}
	if n := len(p.Holes); n > 0 {
		p.ClockMs = max(p.Holes[n-1].FirstSeenMs, 0)
		if p.Holes[0].FirstSeenMs < 0 {
			return Position{}, fmt.Errorf("%w: negative first-seen time", ErrBadPosition)
		}
	}
	return p, nil
}

// MaxPositionBytes is the largest a version 2 position with at most gaps
// open holes, none older than maxAge, can encode to. The worst case is
// every hole its own range (ids apart, each first seen at a different
// millisecond); the id tokens are bounded because their values sum to at
// most twice the highest id (< 2^64) plus the flag bits, and the time
// deltas because all holes are younger than maxAge (Expire runs before
// every encode), so their sum is at most maxAge.
func MaxPositionBytes(gaps int, maxAge time.Duration) int {
	n := uint64(max(gaps, 0))
	header := 1 + 3*binary.MaxVarintLen64
	ids := maxUvarintSum(n, 2*math.MaxUint64+float64(n))
	seen := binary.MaxVarintLen64 + maxUvarintSum(n-min(n, 1), float64(max(maxAge.Milliseconds(), 0)))
	return header + ids + seen
}

// maxUvarintSum is the most bytes n uvarints whose values sum to at most
// total can take: lengthen values a byte at a time, cheapest first, while
// the sum allows.
func maxUvarintSum(n uint64, total float64) int {
	sum := n
	k := float64(n) // values at the current length
	for l := 1; l < binary.MaxVarintLen64 && k > 0; l++ {
		cost := math.Ldexp(1, 7*l) // smallest value of length l+1
		if l > 1 {
			cost -= math.Ldexp(1, 7*(l-1))
		}
		k = math.Min(k, math.Floor(total/cost))
		total -= k * cost
		sum += uint64(k)
	}
	return int(sum) + 1 // one byte of slack for float rounding
}

// positionValueLimit is the largest position value the relay may produce:
// one record alone in a batch under a default broker's max.message.bytes,
// with which `roomflow topics` creates the relay offsets topic.
func positionValueLimit(name string) int {
	return 1<<20 - recordOverhead - len(name) - len(probeSuffix)
}

// MaxOpenGapsFor is the largest relay.max_open_gaps whose worst-case
// position still fits a position record of relay name with holes up to
// maxAge old.
func MaxOpenGapsFor(name string, maxAge time.Duration) int {
	limit := positionValueLimit(name)
	return sort.Search(maxDecodedHoles+1, func(n int) bool { return MaxPositionBytes(n, maxAge) > limit }) - 1
}
