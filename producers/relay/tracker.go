package relay

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"time"
)

// blockHoles is how many holes one block of a Tracker holds at most.
const blockHoles = 1024

// holeBlock is a run of open holes, ascending, never empty, with the
// encoding of its ranges cached (see Tracker).
type holeBlock struct {
	holes  []Hole
	enc    []byte // nil when stale
	ranges int
}

// Tracker is the pure gap-tracking state machine: it turns the ids a scan
// returned into a new Position, remembering skipped ids as holes, and
// enforces the age and count bounds. It does no I/O and reads no clock;
// callers pass their (monotonic) time in, so it is table-tested.
//
// Holes are kept ascending by id with FirstSeenMs non-decreasing: new holes
// are always above every open one and the position clock never goes back.
// So the lowest id is also the oldest, and both bounds trim from the front.
//
// A batch's cost does not grow with the number of open holes: they are
// kept in blocks of at most blockHoles, each with its encoding cached, so
// opening, filling or giving up holes re-encodes only the blocks touched
// (and the one after, whose first range is relative to them), and Encode
// otherwise only copies cached bytes; ProbeIDs hands out a bounded number
// of ids per probe. What stays proportional to the open holes is the size
// of the position record itself (a few bytes per hole; MaxPositionBytes).
type Tracker struct {
	high     uint64
	clock    int64 // position clock (Position.ClockMs)
	blocks   []*holeBlock
	open     int
	maxHoles int
	maxAge   time.Duration
	start    time.Time // the leader's clock when the position was restored
	base     int64     // the restored position's clock
	cursor   uint64    // the next older hole id ProbeIDs hands out
	mode     Mode      // Position.Mode
	binlog   BinlogPosition
}

// NewTracker starts from a restored position at the leader's time now.
// maxHoles < 1 is treated as 1.
func NewTracker(p Position, maxHoles int, maxAge time.Duration, now time.Time) *Tracker {
	t := &Tracker{high: p.High, clock: p.ClockMs, maxHoles: max(maxHoles, 1), maxAge: maxAge, start: now, base: p.ClockMs,
		mode: p.Mode, binlog: p.Binlog}
	t.append(p.Holes)
	return t
}

// tick moves the position clock to now and returns it.
func (t *Tracker) tick(now time.Time) int64 {
	if c := t.base + now.Sub(t.start).Milliseconds(); c > t.clock {
		t.clock = c
	}
	return t.clock
}

// Position returns a copy of the current position (for inspection; the
// batch path uses High, OpenHoles and Encode).
func (t *Tracker) Position() Position {
	p := Position{Mode: t.mode, Binlog: t.binlog, High: t.high, ClockMs: t.clock, Holes: make([]Hole, 0, t.open)}
	for _, b := range t.blocks {
		p.Holes = append(p.Holes, b.holes...)
	}
	return p
}

// SetBinlog makes the position a binlog-mode one at b (see
// BinlogPosition): the next Encode carries it with the current high-water
// id and holes. It fails with ErrBinlogPositionTooLarge for a b that does
// not fit a position record, leaving the position as it was.
func (t *Tracker) SetBinlog(b BinlogPosition) error {
	if err := b.check(); err != nil {
		return err
	}
	t.mode, t.binlog = ModeBinlog, b
	return nil
}

// SetPoll makes the position a poll-mode one (a switch back from binlog
// mode): the binlog part is dropped, high-water id and holes kept.
func (t *Tracker) SetPoll() { t.mode, t.binlog = ModePoll, BinlogPosition{} }

// Binlog is the binlog position (zero in poll mode).
func (t *Tracker) Binlog() BinlogPosition { return t.binlog }

// High is the high-water id.
func (t *Tracker) High() uint64 { return t.high }

// OpenHoles is the number of open holes.
func (t *Tracker) OpenHoles() int { return t.open }

// append adds holes above every open one.
func (t *Tracker) append(hs []Hole) {
	for len(hs) > 0 {
		n := len(t.blocks)
		if n == 0 || len(t.blocks[n-1].holes) == blockHoles {
			t.blocks = append(t.blocks, &holeBlock{holes: make([]Hole, 0, min(len(hs), blockHoles))})
			n++
		}
		b := t.blocks[n-1]
		k := min(len(hs), blockHoles-len(b.holes))
		b.holes = append(b.holes, hs[:k]...)
		b.enc = nil
		t.open += k
		hs = hs[k:]
	}
}

// stale drops the cached encoding of block i and of the block after it,
// whose first range is encoded relative to block i's last hole.
func (t *Tracker) stale(i int) {
	for j := i; j < min(i+2, len(t.blocks)); j++ {
		t.blocks[j].enc = nil
	}
}

// removeFront gives up the k oldest holes and returns them as runs.
func (t *Tracker) removeFront(k int, reason AbandonReason) []Abandoned {
	var out []Abandoned
	dropped := 0
	for k > 0 {
		b := t.blocks[dropped]
		n := min(k, len(b.holes))
		out = appendRuns(out, b.holes[:n], reason, t.clock)
		t.open -= n
		k -= n
		if n == len(b.holes) {
			dropped++
			continue
		}
		b.holes = b.holes[n:]
	}
	t.blocks = slices.Delete(t.blocks, 0, dropped)
	if len(t.blocks) > 0 {
		t.blocks[0].enc = nil
	}
	return out
}

// ProbeIDs returns at most limit open hole ids to look up, ascending: all
// of them when they fit; otherwise the youngest quarter of limit (a late
// commit usually lands within seconds) and the rest taken round-robin from
// the older holes, so each older hole is looked up once every open/limit
// probes. A probe's cost is bounded by limit, not by how many holes are
// open.
func (t *Tracker) ProbeIDs(limit int) []uint64 {
	ids := make([]uint64, 0, min(limit, t.open))
	if t.open <= limit {
		for _, b := range t.blocks {
			ids = appendIDs(ids, b.holes)
		}
		return ids
	}
	young := t.Youngest(limit / 4)
	// Older holes are those below the first young one.
	bound := t.high + 1
	if len(young) > 0 {
		bound = young[0]
	}
	n := limit - len(young)
	ids = t.idsFrom(ids, t.cursor, bound, n)
	if len(ids) < n { // wrap around
		wrapped := t.idsFrom(nil, 0, min(t.cursor, bound), n-len(ids))
		ids = append(wrapped, ids...)
		if len(wrapped) > 0 {
			t.cursor = wrapped[len(wrapped)-1] + 1
		}
	} else {
		t.cursor = ids[len(ids)-1] + 1
	}
	return append(ids, young...)
}

// Youngest returns the ids of the n youngest (highest) holes, ascending.
func (t *Tracker) Youngest(n int) []uint64 {
	i, k := len(t.blocks), 0
	for i > 0 && k < n {
		i--
		k += len(t.blocks[i].holes)
	}
	out := make([]uint64, 0, k)
	for _, b := range t.blocks[i:] {
		out = appendIDs(out, b.holes)
	}
	return out[len(out)-min(n, len(out)):]
}

// idsFrom appends up to n open hole ids in [from, below), ascending.
func (t *Tracker) idsFrom(out []uint64, from, below uint64, n int) []uint64 {
	i := sort.Search(len(t.blocks), func(i int) bool { return lastOf(t.blocks[i]).ID >= from })
	for k := 0; i < len(t.blocks) && k < n; i++ {
		hs := t.blocks[i].holes
		j := sort.Search(len(hs), func(j int) bool { return hs[j].ID >= from })
		for ; j < len(hs) && k < n; j++ {
			if hs[j].ID >= below {
				return out
			}
			out = append(out, hs[j].ID)
			k++
		}
	}
	return out
}

func lastOf(b *holeBlock) Hole { return b.holes[len(b.holes)-1] }

func appendIDs(out []uint64, hs []Hole) []uint64 {
	for _, h := range hs {
		out = append(out, h.ID)
	}
	return out
}

// MaxOutboxID is the largest outbox id the relay takes. A position stores
// a hole as its distance from the previous range shifted left by one bit
// (position.go), which holds any distance below 2^63: with every id at
// most 2^63, every hole lies below 2^63 and no distance can wrap.
const MaxOutboxID = 1 << 63

// IDRangeError means the outbox table handed out an id above MaxOutboxID
// (its AUTO_INCREMENT was set that high). The relay stops at that row
// rather than store a position that would decode to other ids; nothing
// before it is lost.
type IDRangeError struct{ ID uint64 }

func (e *IDRangeError) Error() string {
	return fmt.Sprintf("relay: outbox id %d is above %d, the largest id a relay position can hold; keep the table's AUTO_INCREMENT at most 2^63", e.ID, uint64(MaxOutboxID))
}

// Advance records a scan of ids strictly above High, ascending (as
// `WHERE id > High ORDER BY id` returns them): every id skipped between
// them becomes a hole first seen now, and High moves to the last id.
// If more than maxHoles holes would be open, the oldest are abandoned and
// returned. Ids not above High or not ascending are a caller bug and are
// reported as an error without changing the state, and so is an id above
// MaxOutboxID (an *IDRangeError).
func (t *Tracker) Advance(ids []uint64, now time.Time) ([]Abandoned, error) {
	prev := t.high
	for _, id := range ids {
		if id <= prev {
			return nil, fmt.Errorf("relay: scan returned id %d not above %d", id, prev)
		}
		if id > MaxOutboxID {
			return nil, &IDRangeError{ID: id}
		}
		prev = id
	}
	clock := t.tick(now)
	var out []Abandoned
	prev = t.high
	for _, id := range ids {
		if id > prev+1 {
			out = append(out, t.addRange(prev+1, id-1, clock)...)
		}
		prev = id
	}
	t.high = prev
	return out, nil
}

// addRange opens holes from..to, abandoning the oldest beyond maxHoles. A
// range wider than maxHoles abandons its lower part at once without ever
// materialising it, so a huge id jump costs no memory.
func (t *Tracker) addRange(from, to uint64, clock int64) []Abandoned {
	var out []Abandoned
	if n := to - from + 1; n > uint64(t.maxHoles) {
		cut := to - uint64(t.maxHoles) // abandon from..cut
		out = append(out, Abandoned{From: from, To: cut, Reason: AbandonMaxOpenGaps})
		from = cut + 1
	}
	if need := t.open + int(to-from+1) - t.maxHoles; need > 0 {
		out = append(out, t.removeFront(need, AbandonMaxOpenGaps)...)
	}
	hs := make([]Hole, 0, to-from+1)
	for id := from; id <= to; id++ {
		hs = append(hs, Hole{ID: id, FirstSeenMs: clock})
		if id == to { // guards overflow at MaxUint64
			break
		}
	}
	t.append(hs)
	return out
}

// find returns the block and index of hole id, ok false when id is no
// open hole.
func (t *Tracker) find(id uint64) (bi, hi int, ok bool) {
	bi = sort.Search(len(t.blocks), func(i int) bool { return lastOf(t.blocks[i]).ID >= id })
	if bi == len(t.blocks) {
		return 0, 0, false
	}
	hs := t.blocks[bi].holes
	hi = sort.Search(len(hs), func(j int) bool { return hs[j].ID >= id })
	return bi, hi, hi < len(hs) && hs[hi].ID == id
}

// IsOpen reports whether id is an open hole.
func (t *Tracker) IsOpen(id uint64) bool {
	_, _, ok := t.find(id)
	return ok
}

// Fill closes the holes whose rows appeared (found by the hole query) and
// returns how many were open. Ids that are not open holes are ignored.
func (t *Tracker) Fill(ids []uint64) int {
	n := 0
	for _, id := range ids {
		i, j, ok := t.find(id)
		if !ok {
			continue
		}
		b := t.blocks[i]
		b.holes = slices.Delete(b.holes, j, j+1)
		t.open--
		n++
		if len(b.holes) == 0 {
			t.blocks = slices.Delete(t.blocks, i, i+1)
			if i < len(t.blocks) {
				t.blocks[i].enc = nil
			}
			continue
		}
		t.stale(i)
	}
	return n
}

// Expire abandons every hole first seen more than maxAge before now, but
// for the ids in keep: holes whose rows a read found and left for a later
// batch (poll mode's byte budget). Their transactions committed in time.
func (t *Tracker) Expire(now time.Time, keep ...uint64) []Abandoned {
	clock := t.tick(now)
	if t.maxAge <= 0 || t.open == 0 {
		return nil
	}
	limit := clock - t.maxAge.Milliseconds()
	k := 0
	for _, b := range t.blocks {
		if lastOf(b).FirstSeenMs < limit {
			k += len(b.holes)
			continue
		}
		k += sort.Search(len(b.holes), func(j int) bool { return b.holes[j].FirstSeenMs >= limit })
		break
	}
	if k == 0 {
		return nil
	}
	if len(keep) == 0 {
		return t.removeFront(k, AbandonMaxAge)
	}
	return t.expireKeeping(k, limit, keep)
}

// expireKeeping gives up the k oldest holes except those in keep, which
// stay in front aged exactly maxAge (first seen at limit): so the
// position's time span stays within maxAge, as MaxPositionBytes assumes.
func (t *Tracker) expireKeeping(k int, limit int64, keep []uint64) []Abandoned {
	kept := make(map[uint64]bool, len(keep))
	for _, id := range keep {
		kept[id] = true
	}
	var gone, stay []Hole
	for _, b := range t.blocks {
		for _, h := range b.holes[:min(k, len(b.holes))] {
			if kept[h.ID] {
				stay = append(stay, Hole{ID: h.ID, FirstSeenMs: limit})
			} else {
				gone = append(gone, h)
			}
		}
		if k -= len(b.holes); k <= 0 {
			break
		}
	}
	t.removeFront(len(gone)+len(stay), AbandonMaxAge) // gone's runs are built below, without the kept ids
	front := make([]*holeBlock, 0, len(stay)/blockHoles+1)
	for hs := range slices.Chunk(stay, blockHoles) {
		front = append(front, &holeBlock{holes: hs})
	}
	t.blocks = slices.Insert(t.blocks, 0, front...)
	t.open += len(stay)
	return appendRuns(nil, gone, AbandonMaxAge, t.clock)
}

// appendRuns appends ascending holes as runs of consecutive ids, each open
// for clock minus its first hole's first-seen time.
func appendRuns(out []Abandoned, hs []Hole, reason AbandonReason, clock int64) []Abandoned {
	for _, h := range hs {
		if n := len(out); n > 0 && out[n-1].To+1 == h.ID && out[n-1].Reason == reason {
			out[n-1].To = h.ID
			continue
		}
		out = append(out, Abandoned{From: h.ID, To: h.ID, Reason: reason,
			OpenFor: time.Duration(clock-h.FirstSeenMs) * time.Millisecond})
	}
	return out
}

// Encode returns the encoded current position (see EncodePosition):
// stale blocks are re-encoded, the others' cached bytes copied.
func (t *Tracker) Encode() []byte {
	ranges, size := 0, 0
	var prev Hole
	for _, b := range t.blocks {
		if b.enc == nil {
			b.enc, b.ranges = appendRanges(nil, b.holes, prev)
		}
		ranges += b.ranges
		size += len(b.enc)
		prev = lastOf(b)
	}
	out := appendHeader(make([]byte, 0, 6*binary.MaxVarintLen64+len(t.binlog.GTIDSet)+len(t.binlog.File)+size),
		Position{Mode: t.mode, Binlog: t.binlog, High: t.high, ClockMs: t.clock}, ranges)
	for _, b := range t.blocks {
		out = append(out, b.enc...)
	}
	return out
}
