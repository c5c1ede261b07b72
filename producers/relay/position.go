package relay

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/hyapp/roomflow/schemas/envelope"
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
// reader that meets a higher version stops with ErrBadPosition (and an
// *envelope.VersionError, the rule of schemas/envelope) instead of
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
// with non-decreasing FirstSeenMs, as a Tracker keeps them. It writes the
// same bytes as a Tracker freshly restored from p (ranges end at every
// blockHoles-th hole, see Tracker).
func EncodePosition(p Position) []byte {
	var body []byte
	ranges := 0
	var prev Hole
	for i := 0; i < len(p.Holes); i += blockHoles {
		hs := p.Holes[i:min(len(p.Holes), i+blockHoles)]
		var n int
		body, n = appendRanges(body, hs, prev)
		ranges += n
		prev = hs[len(hs)-1]
	}
	return append(appendHeader(nil, p, ranges), body...)
}

func appendHeader(b []byte, p Position, ranges int) []byte {
	b = append(b, positionVersion)
	b = binary.AppendUvarint(b, p.High)
	b = binary.AppendUvarint(b, uint64(max(p.ClockMs, 0)))
	return binary.AppendUvarint(b, uint64(ranges))
}

// appendRanges appends the ranges of hs, the first relative to prev (the
// zero Hole for the first of all), and returns how many it wrote.
func appendRanges(b []byte, hs []Hole, prev Hole) ([]byte, int) {
	n := 0
	prevEnd, prevSeen := prev.ID, prev.FirstSeenMs
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
		n++
		i = j
	}
	return b, n
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
		if b[0] > positionVersion {
			return Position{}, fmt.Errorf("%w: %w", ErrBadPosition,
				&envelope.VersionError{Format: "relay position", Version: int(b[0]), Newest: positionVersion})
		}
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
