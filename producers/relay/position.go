package relay

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
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
//
// In binlog mode (Mode ModeBinlog) Binlog says where in the binary log the
// relay is; High and Holes are still kept current from the ids of the
// rows it relays, so that a switch back to poll mode resumes from them and
// neither loses nor duplicates a row.
type Position struct {
	// Mode is ModeBinlog for a position a binlog-mode relay wrote; any
	// other value (ModePoll, or empty as in every version 1 and 2 position
	// and a decoded version 3 poll one) is poll mode.
	Mode Mode
	// Binlog is the binlog position; zero in poll mode.
	Binlog BinlogPosition
	High   uint64
	// ClockMs is the position clock: milliseconds of leadership, advanced
	// by each leader with its own monotonic clock from the value it
	// restored. Hole ages are differences on this clock, so a new leader
	// whose wall clock is hours ahead of (or behind) the old one's ages no
	// hole by the skew; the time between two leaders is not counted, which
	// can only make a hole wait longer, never be given up early.
	ClockMs int64
	Holes   []Hole
}

// BinlogPosition is a place in a server's binary log: a GTID set (the
// transactions already done) where the server has GTIDs, which survives a
// failover to another server of the replication topology, else a file and
// offset, which is only meaningful on the server that wrote it.
//
// Rows counts the relayed INSERT rows of the next transaction (the one
// that starts at this position) that are already in Kafka: a MySQL
// transaction larger than relay.max_batch_bytes is relayed in several
// Kafka transactions, each storing the position of the MySQL transaction's
// start and how many of its rows it covers, so a new leader skips exactly
// those and relays the rest, once. Rows is 0 between transactions.
type BinlogPosition struct {
	// Flavor is the server's: FlavorMariaDB or FlavorMySQL (GTID sets are
	// written differently); empty for no position.
	Flavor string
	// GTIDSet is the executed GTID set ("0-1-42" on MariaDB,
	// "3E11FA47-...:1-42" on MySQL); empty when the position is File and
	// Offset.
	GTIDSet string
	// File and Offset are the binlog file and the offset of the next
	// event; set with a GTID set too, for logs and the purge check.
	File   string
	Offset uint64
	Rows   uint64
}

// IsZero reports whether b names no position at all.
func (b BinlogPosition) IsZero() bool { return b.GTIDSet == "" && b.File == "" }

// Flavors of BinlogPosition.Flavor, as go-mysql names them.
const (
	FlavorMariaDB = "mariadb"
	FlavorMySQL   = "mysql"
)

// Limits of the binlog part of a position record, so that MaxPositionBytes
// can bound it: a longer GTID set (hundreds of MySQL server UUIDs) or file
// name fails the relay with ErrBinlogPositionTooLarge instead of a record
// the broker refuses.
const (
	MaxGTIDSetBytes    = 8 << 10
	MaxBinlogFileBytes = 512
	maxBinlogPartBytes = 1 + 4*binary.MaxVarintLen64 + len(FlavorMariaDB) + MaxGTIDSetBytes + MaxBinlogFileBytes
)

// ErrBinlogPositionTooLarge is returned for a binlog position whose GTID
// set or file name is longer than MaxGTIDSetBytes or MaxBinlogFileBytes.
var ErrBinlogPositionTooLarge = errors.New("relay: binlog position too large for a position record")

// check returns ErrBinlogPositionTooLarge (wrapped, naming the part) when b
// does not fit a position record.
func (b BinlogPosition) check() error {
	if len(b.GTIDSet) > MaxGTIDSetBytes {
		return fmt.Errorf("%w: GTID set of %d bytes (at most %d)", ErrBinlogPositionTooLarge, len(b.GTIDSet), MaxGTIDSetBytes)
	}
	if len(b.File) > MaxBinlogFileBytes {
		return fmt.Errorf("%w: file name of %d bytes (at most %d)", ErrBinlogPositionTooLarge, len(b.File), MaxBinlogFileBytes)
	}
	return nil
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
// Version 3 (written since roomflow gained relay.mode):
//
//	byte    3
//	byte    mode: 0 poll, 1 binlog
//	if binlog:
//	  byte    flavor: 0 none, 1 mariadb, 2 mysql
//	  uvarint length, GTID set text
//	  uvarint length, file name
//	  uvarint offset
//	  uvarint rows (BinlogPosition.Rows)
//	the rest of version 2 after its version byte (high, clock, ranges)
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
// version is never changed once released; a new form (such as a binlog
// GTID set) takes a new number, and a writer keeps writing the older
// version for a position that version can hold (a poll position is
// written as version 2), so a poll deployment can roll back across this
// release. A reader that meets a higher version stops with ErrBadPosition
// (and an *envelope.VersionError, the rule of schemas/envelope) instead of
// guessing: a relay that predates binlog mode cannot take over from a
// binlog-mode one.
const positionVersion = 3

const (
	positionVersion1 = 1
	positionVersion2 = 2
)

// Mode bytes of a version 3 position.
const (
	modeBytePoll   = 0
	modeByteBinlog = 1
)

var flavorBytes = []string{"", FlavorMariaDB, FlavorMySQL}

// ErrBadPosition is returned for a position record that does not decode.
var ErrBadPosition = errors.New("relay: malformed position record")

// maxDecodedHoles bounds what a (corrupt) position may make the decoder
// allocate; MaxOpenGapsFor never allows more open holes than this.
const maxDecodedHoles = 1 << 21

// EncodePosition serialises p (version 3 in binlog mode, version 2 in
// poll mode, whose bytes version 3 would only prefix with a mode byte); holes must be ascending by id
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

// appendHeader appends everything before the hole ranges. p.Binlog must
// pass check (longer strings are cut, making a position that does not
// decode as what was meant: the relay checks before it encodes).
func appendHeader(b []byte, p Position, ranges int) []byte {
	if p.Mode == ModeBinlog {
		b = append(b, positionVersion, modeByteBinlog)
		b = append(b, byte(max(slices.Index(flavorBytes, p.Binlog.Flavor), 0)))
		b = appendString(b, p.Binlog.GTIDSet, MaxGTIDSetBytes)
		b = appendString(b, p.Binlog.File, MaxBinlogFileBytes)
		b = binary.AppendUvarint(b, p.Binlog.Offset)
		b = binary.AppendUvarint(b, p.Binlog.Rows)
	} else {
		// A poll position is version 2's bytes: a poll deployment can
		// still roll back to a relay that predates version 3.
		b = append(b, positionVersion2)
	}
	b = binary.AppendUvarint(b, p.High)
	b = binary.AppendUvarint(b, uint64(max(p.ClockMs, 0)))
	return binary.AppendUvarint(b, uint64(ranges))
}

func appendString(b []byte, s string, limit int) []byte {
	s = s[:min(len(s), limit)]
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
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
	case positionVersion2:
		p, err = d.v2()
	case positionVersion:
		p, err = d.v3()
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

func (d *decoder) byte(what string) byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.err = fmt.Errorf("%w: %s", ErrBadPosition, what)
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) string(what string, limit int) string {
	n := d.uvarint(what)
	if d.err != nil {
		return ""
	}
	if n > uint64(limit) || n > uint64(len(d.b)) {
		d.err = fmt.Errorf("%w: %s length", ErrBadPosition, what)
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) v3() (Position, error) {
	var bp BinlogPosition
	var mode Mode
	switch m := d.byte("mode"); m {
	case modeBytePoll:
	case modeByteBinlog:
		mode = ModeBinlog
		f := d.byte("flavor")
		if int(f) >= len(flavorBytes) {
			return Position{}, fmt.Errorf("%w: flavor %d", ErrBadPosition, f)
		}
		bp.Flavor = flavorBytes[f]
		bp.GTIDSet = d.string("gtid set", MaxGTIDSetBytes)
		bp.File = d.string("file", MaxBinlogFileBytes)
		bp.Offset = d.uvarint("offset")
		bp.Rows = d.uvarint("rows")
	default:
		if d.err == nil {
			return Position{}, fmt.Errorf("%w: unknown mode %d", ErrBadPosition, m)
		}
	}
	if d.err != nil {
		return Position{}, d.err
	}
	p, err := d.v2()
	p.Mode, p.Binlog = mode, bp
	return p, err
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
		// A delta of 0 is a repeated id, or for the first hole id 0, which
		// version 2 cannot encode: the position would not restore once re-encoded.
		if delta == 0 || id > p.High {
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

// MaxPositionBytes is the largest a version 3 position with at most gaps
// open holes, none older than maxAge, can encode to. The worst case is
// every hole its own range (ids apart, each first seen at a different
// millisecond); the id tokens are bounded because their values sum to at
// most twice the highest id (< 2^64) plus the flag bits, and the time
// deltas because all holes are younger than maxAge (Expire runs before
// every encode), so their sum is at most maxAge.
func MaxPositionBytes(gaps int, maxAge time.Duration) int {
	n := uint64(max(gaps, 0))
	header := 2 + 3*binary.MaxVarintLen64 + maxBinlogPartBytes
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
