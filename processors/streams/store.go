package streams

import (
	"encoding/binary"
	"errors"
	"strconv"
	"time"
	"unsafe"

	"github.com/hyapp/roomflow/schemas/envelope"
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
// The key "\x00roomflow.restore-marker" is reserved for the changelog's
// restore markers: writing it panics.
//
// A Store is used only from the runtime's processing goroutine (inside
// Process or a punctuation); it is not safe for concurrent use.
//
// Implementation: writes go straight into one map (so a read is one map
// lookup and a commit touches no map entry), and the first write of a key
// in a transaction remembers the key's value before the transaction, so an
// abort puts it back. The dirty list, in first-write order, is what the
// commit turns into changelog records. A key's entry in the map names its
// place in that list while the transaction is open (entry.gen, entry.txn),
// so a write looks the key up once.
type Store struct {
	clock func() time.Time
	m     map[string]entry // committed state with the open transaction's writes
	// gen numbers the open transaction (never 0, the gen of an entry not
	// written since a restore).
	gen uint32
	// gone indexes txn by key for the keys the open transaction deleted
	// (absent from m, so their entry cannot say it).
	gone map[string]int32
	txn  []dirtyKey
	// undo restores the writes of the record being processed when it is
	// rejected (its writes must not survive).
	undo      []undoEntry
	recording bool

	bytes          int64 // key+value bytes of m
	committedBytes int64 // ... as of the last commit or restore
	committedLen   int

	writes    uint64 // counts the writes, undos and restores (Slot)
	rollbacks uint64 // counts the undos and restores (Rollbacks)
}

type entry struct {
	value     []byte
	expiresMs int64 // 0: no expiry
	// gen and txn: written by the transaction numbered gen, at index
	// txn-1 of Store.txn (meaningful only while gen is Store.gen).
	gen uint32
	txn int32
}

// dirtyKey is a key written in the open transaction.
type dirtyKey struct {
	key     string
	before  entry // committed value, if hadKey
	hadKey  bool
	cur     entry // value now, unless deleted
	deleted bool
	removed bool // the write was undone by a rejected record: no changelog record
}

type undoEntry struct {
	key      string
	prev     entry // value in m before the write, if hadPrev
	hadPrev  bool
	newDirty bool  // the write made the key dirty
	txn      int32 // the key's index in Store.txn
}

func newStore(clock func() time.Time) *Store {
	return &Store{clock: clock, m: map[string]entry{}, gen: 1, gone: map[string]int32{}}
}

func (e entry) live(nowMs int64) bool { return e.expiresMs == 0 || e.expiresMs > nowMs }

// Get returns the value of key and whether it exists (and has not expired).
// It reads the clock only for a key with a TTL.
func (s *Store) Get(key string) ([]byte, bool) {
	e, ok := s.m[key]
	if !ok || e.expiresMs != 0 && !e.live(s.clock().UnixMilli()) {
		return nil, false
	}
	return e.value, true
}

// Put sets key to value with no expiry.
func (s *Store) Put(key string, value []byte) { s.write(key, entry{value: value}, false) }

// Slot is what GetSlot found under a key, so that PutSlot can write the
// key without looking it up again: a read-modify-write of one key costs
// one lookup and one map assignment.
type Slot struct {
	key    string
	prev   entry
	had    bool
	writes uint64
}

// GetSlot is Get, with the key's Slot for a PutSlot of the same key. The
// Slot keeps key as given: its bytes must not change while the Slot may
// still be used (a key built in a reused buffer and rebuilt for another
// key would pass PutSlot's same-key check).
func (s *Store) GetSlot(key string) ([]byte, bool, Slot) {
	e, had := s.m[key]
	sl := Slot{key: key, prev: e, had: had, writes: s.writes}
	if !had || e.expiresMs != 0 && !e.live(s.clock().UnixMilli()) {
		return nil, false, sl
	}
	return e.value, true, sl
}

// PutSlot is Put(key, value) for the key sl was read for. Without a write
// to the store since that GetSlot it skips Put's lookup; otherwise, or for
// another key, it is Put.
func (s *Store) PutSlot(sl *Slot, key string, value []byte) {
	if sl.writes != s.writes || sl.key != key {
		s.Put(key, value)
		return
	}
	s.writeFrom(key, entry{value: value}, false, sl.prev, sl.had)
}

// Rollbacks counts the times writes were undone (a rejected record, an
// aborted transaction) or state was restored. A processor caching a value
// it alone writes may keep it while Rollbacks is unchanged.
func (s *Store) Rollbacks() uint64 { return s.rollbacks }

// PutTTL sets key to value; it disappears ttl after now (runtime clock):
// Get stops returning it at once, and a periodic sweep deletes it with a
// changelog tombstone. A restore skips expired keys.
func (s *Store) PutTTL(key string, value []byte, ttl time.Duration) {
	s.write(key, entry{value: value, expiresMs: s.clock().Add(ttl).UnixMilli()}, false)
}

// Delete removes key.
func (s *Store) Delete(key string) { s.write(key, entry{}, true) }

func (s *Store) write(key string, e entry, del bool) {
	prev, had := s.m[key]
	s.writeFrom(key, e, del, prev, had)
}

// writeFrom is write with key's current entry in m, prev (if had).
func (s *Store) writeFrom(key string, e entry, del bool, prev entry, had bool) {
	if key == markerKey {
		panic("runtime: store key " + strconv.Quote(key) + " is reserved for restore markers")
	}
	s.writes++
	i, dirty := s.dirtyIndex(key, prev, had)
	if dirty {
		s.txn[i].cur, s.txn[i].deleted = e, del
	} else {
		i = int32(len(s.txn))
		s.txn = append(s.txn, dirtyKey{key: key, before: prev, hadKey: had, cur: e, deleted: del})
	}
	if s.recording {
		s.undo = append(s.undo, undoEntry{key: key, prev: prev, hadPrev: had, newDirty: !dirty, txn: i})
	}
	if had {
		s.bytes -= int64(len(key) + len(prev.value))
	}
	if del {
		if had {
			delete(s.m, key)
		}
		s.gone[key] = i
		return
	}
	if !had && dirty {
		delete(s.gone, key) // deleted earlier in the transaction
	}
	e.gen, e.txn = s.gen, i+1
	s.m[key] = e
	s.bytes += int64(len(key) + len(e.value))
}

// dirtyIndex returns the index in txn of key, whose entry in m is e (if
// present), and whether the open transaction wrote it.
func (s *Store) dirtyIndex(key string, e entry, present bool) (int32, bool) {
	if present {
		return e.txn - 1, e.gen == s.gen && e.txn > 0
	}
	if len(s.gone) == 0 {
		return 0, false
	}
	i, ok := s.gone[key]
	return i, ok
}

// Range calls fn for every live key until fn returns false, in no
// particular order. fn may call Put and Delete; a key written during Range
// may or may not be visited again.
func (s *Store) Range(fn func(key string, value []byte) bool) {
	now := s.clock().UnixMilli()
	for k, e := range s.m {
		if e.live(now) && !fn(k, e.value) {
			return
		}
	}
}

// Len is the number of committed keys (expired ones included until swept).
func (s *Store) Len() int {
	if len(s.txn) == 0 {
		return len(s.m)
	}
	return s.committedLen
}

// Bytes is the committed keys' and values' size in bytes.
func (s *Store) Bytes() int64 {
	if len(s.txn) == 0 {
		return s.bytes
	}
	return s.committedBytes
}

// beginRecord starts journaling writes so rejectRecord can undo them.
func (s *Store) beginRecord() { s.recording = true; s.undo = s.undo[:0] }

// endRecord keeps the record's writes.
func (s *Store) endRecord() {
	s.recording = false
	clear(s.undo) // drop the references to old values
	s.undo = s.undo[:0]
}

// rejectRecord undoes the record's writes.
func (s *Store) rejectRecord() {
	s.undoTo(0)
	s.endRecord()
}

// Savepoint marks the writes of the running step (a Process call or a
// punctuation) made so far; RollbackTo undoes the ones made since. A step
// whose unit of work is smaller than the step (a timer closing many
// sessions, one of which reads a value it cannot decode after writing
// another key) drops that unit's writes and goes on.
type Savepoint struct {
	store *Store
	at    int // len(undo) when taken
	gen   uint32
}

// Savepoint returns a mark of the running step's writes so far. It panics
// outside a step (no journal to roll back).
func (s *Store) Savepoint() Savepoint {
	if !s.recording {
		panic("runtime: Store.Savepoint outside a Process call or punctuation")
	}
	return Savepoint{store: s, at: len(s.undo), gen: s.gen}
}

// RollbackTo undoes the writes made since sp, newest first, as a rejected
// record's are (Rollbacks counts it); the changelog gets none of them. It
// panics for a savepoint of another store, step or transaction, or one
// already rolled past.
func (s *Store) RollbackTo(sp Savepoint) {
	if sp.store != s || !s.recording || sp.gen != s.gen || sp.at > len(s.undo) {
		panic("runtime: Store.RollbackTo with a savepoint not of this store's running step")
	}
	s.undoTo(sp.at)
}

// undoTo undoes the journaled writes from the newest down to index at.
func (s *Store) undoTo(at int) {
	s.writes++
	s.rollbacks++
	for i := len(s.undo) - 1; i >= at; i-- {
		u := s.undo[i]
		if cur, ok := s.m[u.key]; ok {
			s.bytes -= int64(len(u.key) + len(cur.value))
		}
		if u.hadPrev {
			s.m[u.key] = u.prev // its gen and txn still say whether it is dirty
			s.bytes += int64(len(u.key) + len(u.prev.value))
			delete(s.gone, u.key)
		} else {
			delete(s.m, u.key)
		}
		switch {
		case u.newDirty:
			// The key is as before the transaction again.
			s.txn[u.txn].removed = true
			delete(s.gone, u.key)
		default:
			s.txn[u.txn].cur, s.txn[u.txn].deleted = u.prev, !u.hadPrev
			if !u.hadPrev {
				s.gone[u.key] = u.txn // deleted earlier in the transaction
			}
		}
	}
	clear(s.undo[at:]) // drop the references to old values
	s.undo = s.undo[:at]
}

// eachDirty calls fn for every key written in the open transaction (in
// first-write order) with its current value, or deleted.
func (s *Store) eachDirty(fn func(key string, e entry, deleted bool)) {
	for i := range s.txn {
		d := &s.txn[i]
		if !d.removed {
			fn(d.key, d.cur, d.deleted)
		}
	}
}

// commit makes the transaction's writes the committed state.
func (s *Store) commit() {
	s.committedLen, s.committedBytes = len(s.m), s.bytes
	s.endTxn()
}

// abort puts back the committed value of every key the transaction wrote.
func (s *Store) abort() {
	s.writes++
	s.rollbacks++
	s.endRecord()
	for i := len(s.txn) - 1; i >= 0; i-- {
		d := &s.txn[i]
		if d.removed {
			continue
		}
		if d.hadKey {
			s.m[d.key] = d.before
		} else {
			delete(s.m, d.key)
		}
	}
	s.bytes = s.committedBytes
	s.endTxn()
}

func (s *Store) endTxn() {
	s.writes++   // the entries' gen changes
	clear(s.txn) // drop the references to keys and old values
	s.txn = s.txn[:0]
	clear(s.gone)
	s.committedLen, s.committedBytes = len(s.m), s.bytes
	s.gen++
	if s.gen == 0 { // wrapped: no entry may claim the new numbers
		for k, e := range s.m {
			e.gen = 0
			s.m[k] = e
		}
		s.gen = 1
	}
}

// dirtyValue is the transaction's write of key (tests).
func (s *Store) dirtyValue(key string) (e entry, deleted, ok bool) {
	cur, present := s.m[key]
	i, ok := s.dirtyIndex(key, cur, present)
	if !ok {
		return entry{}, false, false
	}
	return s.txn[i].cur, s.txn[i].deleted, true
}

// sweepExpired deletes committed keys expired at now (as writes of the open
// transaction, so the tombstones commit with it). It returns how many.
func (s *Store) sweepExpired(now time.Time) int {
	ms := now.UnixMilli()
	var expired []string
	for k, e := range s.m {
		if _, dirty := s.dirtyIndex(k, e, true); dirty {
			continue // rewritten in this transaction
		}
		if !e.live(ms) {
			expired = append(expired, k)
		}
	}
	for _, k := range expired {
		s.Delete(k)
	}
	return len(expired)
}

// restoreRecord applies one changelog record during restore (no
// transaction is open).
//
// The key and value are copied into one exact-size allocation: the record's
// slices share its fetch's whole batch buffer, which the store would keep
// alive for as long as any of its values lives.
func (s *Store) restoreRecord(key, value []byte, nowMs int64) error {
	s.writes++
	s.rollbacks++
	k := unsafe.String(unsafe.SliceData(key), len(key)) // lookups only; the stored key is kv's
	if old, ok := s.m[k]; ok {
		s.bytes -= int64(len(k) + len(old.value))
		delete(s.m, k)
	}
	if value != nil {
		e, err := decodeChangelogValue(value)
		if err != nil {
			s.committedLen, s.committedBytes = len(s.m), s.bytes
			return err
		}
		if e.live(nowMs) {
			kv := make([]byte, len(k)+len(e.value))
			copy(kv, k)
			copy(kv[len(k):], e.value)
			e.value = kv[len(k):len(kv):len(kv)]
			s.m[unsafe.String(unsafe.SliceData(kv), len(k))] = e
			s.bytes += int64(len(k) + len(e.value))
		}
	}
	s.committedLen, s.committedBytes = len(s.m), s.bytes
	return nil
}

// Changelog value format: 1 byte version (1), 8 bytes big-endian expiry in
// unix ms (0 = none), then the value. A tombstone (nil value) deletes.
// Compatibility (the rule of schemas/envelope): a reader decodes every
// version up to changelogVersion and refuses a higher one with a
// *envelope.VersionError, which stops the restore (a *RestoreError) rather
// than guessing at another release's state; a writer writes a new version
// only once every running release reads it.
const changelogVersion = 1

var errChangelogValue = errors.New("changelog value: bad format")

// ChangelogValue is the changelog record value of a store value with no
// expiry: what a tool writing a store's changelog while its processor is
// stopped (`roomflow totals bootstrap`) produces, so the restore reads it
// as the processor's own write.
func ChangelogValue(value []byte) []byte { return encodeChangelogValue(entry{value: value}) }

func encodeChangelogValue(e entry) []byte {
	return appendChangelogValue(make([]byte, 0, 9+len(e.value)), e)
}

func appendChangelogValue(b []byte, e entry) []byte {
	b = append(b, changelogVersion)
	b = binary.BigEndian.AppendUint64(b, uint64(e.expiresMs))
	return append(b, e.value...)
}

func decodeChangelogValue(b []byte) (entry, error) {
	if len(b) > 0 && b[0] > changelogVersion {
		return entry{}, &envelope.VersionError{Format: "runtime changelog value", Version: int(b[0]), Newest: changelogVersion}
	}
	if len(b) < 9 || b[0] != changelogVersion {
		return entry{}, errChangelogValue
	}
	v := b[9:]
	if len(v) == 0 {
		v = []byte{}
	}
	return entry{value: v, expiresMs: int64(binary.BigEndian.Uint64(b[1:9]))}, nil
}
