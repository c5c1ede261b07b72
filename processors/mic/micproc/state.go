package micproc

import (
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"github.com/hyapp/roomflow/processors/mic"
	"github.com/hyapp/roomflow/processors/streams"
	"github.com/hyapp/roomflow/schemas/envelope"
)

// storeState is mic.State over the task's runtime store.
//
// A stored key and its value share one allocation, the key first (put):
// the lookup that compares the key brings the value's first bytes into the
// cache with it, and a write allocates once. Lookups use a key built in a
// reused buffer (the store keeps no key it is only asked for). A read and
// the write that follows it (the engine's Session and PutSession, DayRooms
// and PutDayRooms) share one lookup through a streams.Slot.
type storeState struct {
	store *streams.Store
	err   error
	// the last session and day-rooms keys built (in sessionKey, dayKey):
	// Handle reads and writes the same ones
	lastID  mic.SessionID
	lastKey []byte
	lastDay dayRoomsID
	dayKey  []byte
	buf     []byte // encoding buffer of Put*
	// the slots of the last Session and DayRooms reads
	sessionSlot, daySlot streams.Slot
	totalsOn             bool       // mic.totals_enabled
	tot                  userTotals // of the close in progress
}

type dayRoomsID struct {
	appCode string
	userID  int64
	day     int64
}

// dayRoomsKey is the key of id, valid until the next dayRoomsKey call.
func (s *storeState) dayRoomsKey(id dayRoomsID) string {
	if len(s.dayKey) == 0 || id != s.lastDay {
		s.lastDay, s.dayKey = id, mic.AppendDayRoomsKey(s.dayKey[:0], id.appCode, id.userID, id.day)
	}
	return unsafe.String(unsafe.SliceData(s.dayKey), len(s.dayKey))
}

// sessionKey is the key of id, valid until the next sessionKey call.
func (s *storeState) sessionKey(id mic.SessionID) string {
	if len(s.lastKey) == 0 || id != s.lastID {
		s.lastID, s.lastKey = id, id.AppendKey(s.lastKey[:0])
	}
	return unsafe.String(unsafe.SliceData(s.lastKey), len(s.lastKey))
}

// put stores s.buf under key, both copied into one exact-size allocation:
// the store keeps them for the key's life, so any spare capacity would be
// heap per key.
// slot is the Slot of the read of key (streams.Store.PutSlot falls back to
// a lookup if the store was written since).
func (s *storeState) put(slot *streams.Slot, key string) {
	if s.err != nil {
		return // a close that read a corrupt value writes nothing: it does not happen
	}
	kv := make([]byte, len(key)+len(s.buf))
	copy(kv, key)
	copy(kv[len(key):], s.buf)
	s.store.PutSlot(slot, unsafe.String(unsafe.SliceData(kv), len(key)), kv[len(key):])
}

// state returns the processor's reusable storeState bound to t's store
// (Process and punctuations run on one goroutine, one at a time).
func (p *Processor) state(t streams.Task) *storeState {
	st := &p.st
	if st.store != t.Store() {
		*st = storeState{store: t.Store(), lastKey: st.lastKey[:0], dayKey: st.dayKey[:0], buf: st.buf[:0],
			totalsOn: !p.cfg.Settings.DisableTotals, tot: userTotals{key: st.tot.key[:0], tot: mic.Totals{Days: st.tot.tot.Days[:0]}}}
	}
	st.begin()
	return st
}

// begin starts an event or a timer close: no error, no totals read yet.
func (s *storeState) begin() {
	s.err = nil
	s.tot.loaded = false
}

func (s *storeState) Session(id mic.SessionID) (mic.Session, bool) {
	key := s.sessionKey(id)
	b, ok, slot := s.store.GetSlot(key)
	s.sessionSlot = slot
	if !ok {
		return mic.Session{}, false
	}
	var v mic.Session
	if err := v.UnmarshalBinaryAlias(b); err != nil { // store values never change
		s.err = stateError(key, err)
		return mic.Session{}, false
	}
	return v, true
}

// stateError is the error of a state value of key that does not decode. A
// value a newer release wrote (a rolling upgrade side by side) is not
// corrupt: the record's partition stalls and retries until an instance of
// that release owns it, instead of dead-lettering the record.
func stateError(key string, err error) error {
	key = strings.Clone(key) // the error outlives the lookup buffer
	if errors.Is(err, envelope.ErrNewerVersion) {
		return fmt.Errorf("mic: state value of key %x: %w", key, err)
	}
	return streams.CorruptState(key, err)
}

func (s *storeState) PutSession(id mic.SessionID, v mic.Session) {
	s.buf = v.AppendBinary(s.buf[:0])
	s.put(&s.sessionSlot, s.sessionKey(id))
}

// DayRooms reads a user-day's room set where the partition keeps it: in
// the user's totals value once the partition's totals are on, else its
// day-room key. A day the totals value does not keep rooms for yet (one of
// the bootstrap, or from before the totals) starts from its day-room key;
// with the totals turned off again, the rooms they kept still count.
func (s *storeState) DayRooms(appCode string, userID int64, day int64) mic.DayRooms {
	u := s.userTotals(appCode, userID)
	if s.err != nil {
		return nil
	}
	if u.marked && s.totalsOn {
		d := u.tot.DayAt(day)
		if !d.RoomsKept {
			d.Rooms, d.RoomsKept = append(d.Rooms[:0], s.keyRooms(appCode, userID, day)...), true
		}
		return d.Rooms
	}
	rooms := s.keyRooms(appCode, userID, day)
	if d := u.tot.Day(day); d != nil && d.RoomsKept {
		for _, r := range d.Rooms {
			if !rooms.Has(r) {
				rooms = append(rooms, r)
			}
		}
	}
	return rooms
}

// PutDayRooms stores a user-day's room set where DayRooms reads it: in the
// totals value (written once, by updateTotals, after the close) or its
// day-room key.
func (s *storeState) PutDayRooms(appCode string, userID int64, day int64, rooms mic.DayRooms) {
	if u := s.userTotals(appCode, userID); u.marked && s.totalsOn {
		d := u.tot.DayAt(day)
		d.Rooms, d.RoomsKept = rooms, true
		return
	}
	s.buf = rooms.AppendBinary(s.buf[:0])
	s.put(&s.daySlot, s.dayRoomsKey(dayRoomsID{appCode, userID, day}))
}

// keyRooms reads a user-day's day-room key.
func (s *storeState) keyRooms(appCode string, userID int64, day int64) mic.DayRooms {
	key := s.dayRoomsKey(dayRoomsID{appCode, userID, day})
	b, ok, slot := s.store.GetSlot(key)
	s.daySlot = slot
	if !ok {
		return nil
	}
	d, err := mic.UnmarshalDayRooms(b)
	if err != nil {
		s.err = stateError(key, err)
	}
	return d
}

// watermark caches a partition's event-time watermark (mic.KeyWatermark),
// saving a store lookup per event: the processor alone writes the key, so
// the value read or written last stays the store's until the store rolls
// writes back (streams.Store.Rollbacks) or another task's store is used. A
// test seeding the key directly (rttest.Driver.Seed) does so before the
// processor reads the partition.
type watermark struct {
	store     *streams.Store
	rollbacks uint64
	ms        int64
}

func (p *Processor) watermark(t streams.Task) int64 {
	st, c := t.Store(), &p.wm
	if c.store != st || c.rollbacks != st.Rollbacks() {
		b, _ := st.Get(mic.KeyWatermark)
		*c = watermark{store: st, rollbacks: st.Rollbacks(), ms: mic.DecodeWatermark(b)}
	}
	return c.ms
}

// watermarkStep: the stored watermark moves in steps of at least a minute
// (it may lag the true one by less than that, which retentions of a day and
// more do not notice), so most events do not write it, even in a catch-up
// that replays hours of events per second.
const watermarkStepMs = 60_000

func (p *Processor) advanceWatermark(t streams.Task, wm, occurredAtMs int64) {
	if occurredAtMs < wm+watermarkStepMs {
		return // cannot move it a step, whatever the clock: no clock read
	}
	if n := mic.AdvanceWatermark(wm, occurredAtMs, t.Now().UnixMilli()); n >= wm+watermarkStepMs {
		t.Store().Put(mic.KeyWatermark, mic.EncodeWatermark(n))
		p.wm = watermark{store: t.Store(), rollbacks: t.Store().Rollbacks(), ms: n}
	}
}
