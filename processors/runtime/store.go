package runtime

import (
	"encoding/binary"
	"errors"
	"time"
)

// Store is a task's keyed state: an in-memory map of the partition's
// committed state plus the writes of the open transaction.
//
// Reads see the transaction's own writes. Writes become committed state
// only when the transaction commits; an aborted transaction leaves the
// committed state as it was. Each dirty key produces one changelog record
// per transaction (the last write wins; Delete produces a tombstone).
//
// The store keeps the value slices it is given and returns its own slices:
// do not modify a value after Put, nor a value returned by Get.
//
// A Store is used only from the runtime's processing goroutine (inside
// Process or a punctuation); it is not safe for concurrent use.
type Store struct {
	clock     func() time.Time
	committed map[string]entry
	pending   map[string]pendingEntry
	// undo restores pending entries when the record being processed is
	// rejected (its writes must not survive).
	undo      []undoEntry
	recording bool
	bytes     int64 // committed key+value bytes
}

type entry struct {
	value     []byte
	expiresMs int64 // 0: no expiry
}

type pendingEntry struct {
	entry
	deleted bool
}

type undoEntry struct {
	key     string
	prev    pendingEntry
	hadPrev bool
}

func newStore(clock func() time.Time) *Store {
	return &Store{clock: clock, committed: map[string]entry{}, pending: map[string]pendingEntry{}}
}

func (e entry) live(nowMs int64) bool { return e.expiresMs == 0 || e.expiresMs > nowMs }

// Get returns the value of key and whether it exists (and has not expired).
// It reads the clock only for a key with a TTL.
func (s *Store) Get(key string) ([]byte, bool) {
	if p, ok := s.pending[key]; ok {
		if p.deleted || p.expiresMs != 0 && !p.live(s.clock().UnixMilli()) {
			return nil, false
		}
		return p.value, true
	}
	e, ok := s.committed[key]
	if !ok || e.expiresMs != 0 && !e.live(s.clock().UnixMilli()) {
		return nil, false
	}
	return e.value, true
}

// Put sets key to value with no expiry.
func (s *Store) Put(key string, value []byte) { s.write(key, pendingEntry{entry: entry{value: value}}) }

// PutTTL sets key to value; it disappears ttl after now (runtime clock):
// Get stops returning it at once, and a periodic sweep deletes it with a
// changelog tombstone. A restore skips expired keys.
func (s *Store) PutTTL(key string, value []byte, ttl time.Duration) {
	s.write(key, pendingEntry{entry: entry{value: value, expiresMs: s.clock().Add(ttl).UnixMilli()}})
}

// Delete removes key.
func (s *Store) Delete(key string) { s.write(key, pendingEntry{deleted: true}) }

func (s *Store) write(key string, p pendingEntry) {
	if s.recording {
		prev, had := s.pending[key]
		s.undo = append(s.undo, undoEntry{key: key, prev: prev, hadPrev: had})
	}
	s.pending[key] = p
}

// Range calls fn for every live key until fn returns false, committed keys
// first, then keys new in this transaction; the order is otherwise
// unspecified. fn may call Put and Delete; a key written during Range may
// or may not be visited again.
func (s *Store) Range(fn func(key string, value []byte) bool) {
	now := s.clock().UnixMilli()
	for k, e := range s.committed {
		if p, ok := s.pending[k]; ok {
			if p.deleted || !p.live(now) {
				continue
			}
			if !fn(k, p.value) {
				return
			}
			continue
		}
		if e.live(now) && !fn(k, e.value) {
			return
		}
	}
	for k, p := range s.pending {
		if _, ok := s.committed[k]; ok || p.deleted || !p.live(now) {
			continue
		}
		if !fn(k, p.value) {
			return
		}
	}
}

// Len is the number of committed keys (expired ones included until swept).
func (s *Store) Len() int { return len(s.committed) }

// Bytes is the committed keys' and values' size in bytes.
func (s *Store) Bytes() int64 { return s.bytes }

// beginRecord starts journaling writes so rejectRecord can undo them.
func (s *Store) beginRecord() { s.recording = true; s.undo = s.undo[:0] }

// endRecord keeps the record's writes.
func (s *Store) endRecord() { s.recording = false; s.undo = s.undo[:0] }

// rejectRecord undoes the record's writes.
func (s *Store) rejectRecord() {
	for i := len(s.undo) - 1; i >= 0; i-- {
		u := s.undo[i]
		if u.hadPrev {
			s.pending[u.key] = u.prev
		} else {
			delete(s.pending, u.key)
		}
	}
	s.endRecord()
}

// commit applies the transaction's writes to the committed state.
func (s *Store) commit() {
	for k, p := range s.pending {
		if old, ok := s.committed[k]; ok {
			s.bytes -= int64(len(k) + len(old.value))
		}
		if p.deleted {
			delete(s.committed, k)
			continue
		}
		s.committed[k] = p.entry
		s.bytes += int64(len(k) + len(p.value))
	}
	clear(s.pending)
}

// abort discards the transaction's writes.
func (s *Store) abort() { clear(s.pending); s.endRecord() }

// sweepExpired deletes committed keys expired at now (as writes of the open
// transaction, so the tombstones commit with it). It returns how many.
func (s *Store) sweepExpired(now time.Time) int {
	ms := now.UnixMilli()
	n := 0
	for k, e := range s.committed {
		if _, ok := s.pending[k]; ok {
			continue // rewritten in this transaction
		}
		if !e.live(ms) {
			s.pending[k] = pendingEntry{deleted: true}
			n++
		}
	}
	return n
}

// restoreRecord applies one changelog record during restore.
func (s *Store) restoreRecord(key, value []byte, nowMs int64) error {
	k := string(key)
	if old, ok := s.committed[k]; ok {
		s.bytes -= int64(len(k) + len(old.value))
		delete(s.committed, k)
	}
	if value == nil {
		return nil
	}
	e, err := decodeChangelogValue(value)
	if err != nil {
		return err
	}
	if !e.live(nowMs) {
		return nil
	}
	s.committed[k] = e
	s.bytes += int64(len(k) + len(e.value))
	return nil
}

// Changelog value format: 1 byte version (1), 8 bytes big-endian expiry in
// unix ms (0 = none), then the value. A tombstone (nil value) deletes.
const changelogVersion = 1

var errChangelogValue = errors.New("changelog value: bad format")

func encodeChangelogValue(e entry) []byte {
	return appendChangelogValue(make([]byte, 0, 9+len(e.value)), e)
}

func appendChangelogValue(b []byte, e entry) []byte {
	b = append(b, changelogVersion)
	b = binary.BigEndian.AppendUint64(b, uint64(e.expiresMs))
	return append(b, e.value...)
}

func decodeChangelogValue(b []byte) (entry, error) {
	if len(b) < 9 || b[0] != changelogVersion {
		return entry{}, errChangelogValue
	}
	v := b[9:]
	if len(v) == 0 {
		v = []byte{}
	}
	return entry{value: v, expiresMs: int64(binary.BigEndian.Uint64(b[1:9]))}, nil
}
