package relay

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"time"
)

// Hole is an outbox id below the high-water mark that has not been seen yet:
// either its inserting transaction is still open (InnoDB allocates the
// auto-increment id at insert time, so a slow transaction commits a lower id
// after higher ones), or it was rolled back and the id will never appear.
type Hole struct {
	ID uint64
	// FirstSeenMs is when the relay first noticed the id missing (UTC epoch
	// ms); the hole is abandoned once it is older than relay.gap_max_age.
	FirstSeenMs int64
}

// Position is how far the relay has come: every id <= High is relayed,
// except the open Holes (ascending by ID), which are relayed when they
// appear. It is stored in the relay offsets topic in the same Kafka
// transaction as the records it covers, so it can never disagree with them.
type Position struct {
	High  uint64
	Holes []Hole
}

// Clone returns a deep copy.
func (p Position) Clone() Position {
	return Position{High: p.High, Holes: append([]Hole(nil), p.Holes...)}
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
	From, To    uint64 // inclusive
	Reason      AbandonReason
	FirstSeenMs int64 // of From
}

// Count is the number of ids in the run.
func (a Abandoned) Count() uint64 { return a.To - a.From + 1 }

// Tracker is the pure gap-tracking state machine: it turns the ids a scan
// returned into a new Position, remembering skipped ids as holes, and
// enforces the age and count bounds. It does no I/O and reads no clock;
// callers pass time in, so it is table-tested.
//
// Holes are kept ascending by id. Because new holes are always above every
// existing one and time moves forward, the lowest id is also the oldest, so
// both bounds trim from the front.
type Tracker struct {
	pos      Position
	maxHoles int
	maxAge   time.Duration
}

// NewTracker starts from a restored position. maxHoles < 1 is treated as 1.
func NewTracker(p Position, maxHoles int, maxAge time.Duration) *Tracker {
	if maxHoles < 1 {
		maxHoles = 1
	}
	return &Tracker{pos: p.Clone(), maxHoles: maxHoles, maxAge: maxAge}
}

// Position returns a copy of the current position.
func (t *Tracker) Position() Position { return t.pos.Clone() }

// High is the high-water id.
func (t *Tracker) High() uint64 { return t.pos.High }

// OpenHoles is the number of open holes.
func (t *Tracker) OpenHoles() int { return len(t.pos.Holes) }

// HoleIDs returns the open hole ids, ascending.
func (t *Tracker) HoleIDs() []uint64 {
	ids := make([]uint64, len(t.pos.Holes))
	for i, h := range t.pos.Holes {
		ids[i] = h.ID
	}
	return ids
}

// Advance records a scan of ids strictly above High, ascending (as
// `WHERE id > High ORDER BY id` returns them): every id skipped between
// them becomes a hole first seen at now, and High moves to the last id.
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
	nowMs := now.UnixMilli()
	var out []Abandoned
	prev = t.pos.High
	for _, id := range ids {
		if id > prev+1 {
			out = append(out, t.addRange(prev+1, id-1, nowMs)...)
		}
		prev = id
	}
	t.pos.High = prev
	return out, nil
}

// addRange opens holes from..to, abandoning the oldest beyond maxHoles. A
// range wider than maxHoles abandons its lower part at once without ever
// materialising it, so a huge id jump costs no memory.
func (t *Tracker) addRange(from, to uint64, nowMs int64) []Abandoned {
	var out []Abandoned
	if n := to - from + 1; n > uint64(t.maxHoles) {
		cut := to - uint64(t.maxHoles) // abandon from..cut
		out = append(out, Abandoned{From: from, To: cut, Reason: AbandonMaxOpenGaps, FirstSeenMs: nowMs})
		from = cut + 1
	}
	need := len(t.pos.Holes) + int(to-from+1) - t.maxHoles
	if need > 0 {
		out = append(out, runs(t.pos.Holes[:need], AbandonMaxOpenGaps)...)
		t.pos.Holes = append(t.pos.Holes[:0:0], t.pos.Holes[need:]...)
	}
	for id := from; id <= to; id++ {
		t.pos.Holes = append(t.pos.Holes, Hole{ID: id, FirstSeenMs: nowMs})
		if id == to { // guards overflow at MaxUint64
			break
		}
	}
	return out
}

// Fill closes the holes whose rows appeared (found by the hole query) and
// returns how many were open. Ids that are not open holes are ignored.
func (t *Tracker) Fill(ids []uint64) int {
	if len(ids) == 0 || len(t.pos.Holes) == 0 {
		return 0
	}
	filled := make(map[uint64]struct{}, len(ids))
	for _, id := range ids {
		filled[id] = struct{}{}
	}
	kept := t.pos.Holes[:0:0]
	n := 0
	for _, h := range t.pos.Holes {
		if _, ok := filled[h.ID]; ok {
			n++
			continue
		}
		kept = append(kept, h)
	}
	t.pos.Holes = kept
	return n
}

// Expire abandons every hole first seen more than maxAge before now.
func (t *Tracker) Expire(now time.Time) []Abandoned {
	if t.maxAge <= 0 {
		return nil
	}
	limit := now.Add(-t.maxAge).UnixMilli()
	// Holes are ordered by id; first-seen is monotonic in practice but a
	// restored position from another host's clock might not be, so scan all.
	var gone []Hole
	kept := t.pos.Holes[:0:0]
	for _, h := range t.pos.Holes {
		if h.FirstSeenMs < limit {
			gone = append(gone, h)
			continue
		}
		kept = append(kept, h)
	}
	if len(gone) == 0 {
		return nil
	}
	t.pos.Holes = kept
	return runs(gone, AbandonMaxAge)
}

// runs groups ascending holes into runs of consecutive ids.
func runs(hs []Hole, reason AbandonReason) []Abandoned {
	var out []Abandoned
	for _, h := range hs {
		if n := len(out); n > 0 && out[n-1].To+1 == h.ID {
			out[n-1].To = h.ID
			continue
		}
		out = append(out, Abandoned{From: h.ID, To: h.ID, Reason: reason, FirstSeenMs: h.FirstSeenMs})
	}
	return out
}

// Position record encoding (value of the relay offsets topic record whose
// key is relay.transactional_id):
//
//	byte    version (1)
//	uvarint high
//	uvarint number of holes
//	per hole: uvarint id delta from the previous hole (first: from 0),
//	          varint first-seen ms delta from the previous hole (first: absolute)
//
// Delta encoding keeps 100,000 holes (the default relay.max_open_gaps) near
// 300 KB, well under a default broker's 1 MiB record limit.
const positionVersion = 1

// ErrBadPosition is returned for a position record that does not decode.
var ErrBadPosition = errors.New("relay: malformed position record")

// EncodePosition serialises p; holes must be ascending by id.
func EncodePosition(p Position) []byte {
	b := make([]byte, 0, 1+2*binary.MaxVarintLen64+len(p.Holes)*4)
	b = append(b, positionVersion)
	b = binary.AppendUvarint(b, p.High)
	b = binary.AppendUvarint(b, uint64(len(p.Holes)))
	var prevID uint64
	var prevSeen int64
	for _, h := range p.Holes {
		b = binary.AppendUvarint(b, h.ID-prevID)
		b = binary.AppendVarint(b, h.FirstSeenMs-prevSeen)
		prevID, prevSeen = h.ID, h.FirstSeenMs
	}
	return b
}

// DecodePosition parses a value written by EncodePosition.
func DecodePosition(b []byte) (Position, error) {
	if len(b) == 0 || b[0] != positionVersion {
		return Position{}, fmt.Errorf("%w: unknown version", ErrBadPosition)
	}
	b = b[1:]
	next := func() (uint64, bool) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, false
		}
		b = b[n:]
		return v, true
	}
	var p Position
	var ok bool
	if p.High, ok = next(); !ok {
		return Position{}, fmt.Errorf("%w: high", ErrBadPosition)
	}
	count, ok := next()
	if !ok || count > uint64(len(b)) { // every hole takes at least 2 bytes
		return Position{}, fmt.Errorf("%w: hole count", ErrBadPosition)
	}
	p.Holes = make([]Hole, 0, count)
	var id uint64
	var seen int64
	for i := uint64(0); i < count; i++ {
		d, ok := next()
		if !ok {
			return Position{}, fmt.Errorf("%w: hole %d", ErrBadPosition, i)
		}
		s, n := binary.Varint(b)
		if n <= 0 {
			return Position{}, fmt.Errorf("%w: hole %d time", ErrBadPosition, i)
		}
		b = b[n:]
		id += d
		seen += s
		if (i > 0 && d == 0) || id > p.High {
			return Position{}, fmt.Errorf("%w: hole %d out of order", ErrBadPosition, i)
		}
		p.Holes = append(p.Holes, Hole{ID: id, FirstSeenMs: seen})
	}
	if len(b) != 0 {
		return Position{}, fmt.Errorf("%w: trailing bytes", ErrBadPosition)
	}
	if !sort.SliceIsSorted(p.Holes, func(i, j int) bool { return p.Holes[i].ID < p.Holes[j].ID }) {
		return Position{}, fmt.Errorf("%w: holes not ascending", ErrBadPosition)
	}
	return p, nil
}
