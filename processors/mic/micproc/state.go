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
// reused buffer (the store keeps no key it is only asked for).
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
func (s *storeState) put(key string) {
	kv := make([]byte, len(key)+len(s.buf))
	copy(kv, key)
	copy(kv[len(key):], s.buf)
	s.store.Put(unsafe.String(unsafe.SliceData(kv), len(key)), kv[len(key):])
}

// state returns the processor's reusable storeState bound to t's store
// (Process and punctuations run on one goroutine, one at a time).
func (p *Processor) state(t streams.Task) *storeState {
	st := &p.st
	if st.store != t.Store() {
		*st = storeState{store: t.Store(), lastKey: st.lastKey[:0], dayKey: st.dayKey[:0], buf: st.buf[:0]}
	}
	st.err = nil
	return st
}

func (s *storeState) Session(id mic.SessionID) (mic.Session, bool) {
	key := s.sessionKey(id)
	b, ok := s.store.Get(key)
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
	s.put(s.sessionKey(id))
}

func (s *storeState) DayRooms(appCode string, userID int64, day int64) mic.DayRooms {
	key := s.dayRoomsKey(dayRoomsID{appCode, userID, day})
	b, ok := s.store.Get(key)
	if !ok {
		return nil
	}
	d, err := mic.UnmarshalDayRooms(b)
	if err != nil {
		s.err = stateError(key, err)
	}
	return d
}

func (s *storeState) PutDayRooms(appCode string, userID int64, day int64, rooms mic.DayRooms) {
	s.buf = rooms.AppendBinary(s.buf[:0])
	s.put(s.dayRoomsKey(dayRoomsID{appCode, userID, day}))
}
