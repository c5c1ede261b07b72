package mic

// MapState is a State on plain maps holding the encoded values, the way a
// changelog-backed store holds them. It is what the pure tests, fuzzing and
// tools use; it is not safe for concurrent use.
type MapState struct {
	Sessions map[string][]byte
	Days     map[string][]byte
}

// NewMapState returns an empty MapState.
func NewMapState() *MapState {
	return &MapState{Sessions: map[string][]byte{}, Days: map[string][]byte{}}
}

// Session implements State; it panics on a corrupt value, which MapState
// never stores.
func (m *MapState) Session(id SessionID) (Session, bool) {
	b, ok := m.Sessions[id.Key()]
	if !ok {
		return Session{}, false
	}
	var s Session
	if err := s.UnmarshalBinary(b); err != nil {
		panic(err)
	}
	return s, true
}

// PutSession implements State.
func (m *MapState) PutSession(id SessionID, s Session) { m.Sessions[id.Key()] = s.AppendBinary(nil) }

// DayRooms implements State.
func (m *MapState) DayRooms(appCode string, userID int64, day int64) DayRooms {
	d, err := UnmarshalDayRooms(m.Days[DayRoomsKey(appCode, userID, day)])
	if err != nil {
		panic(err)
	}
	return d
}

// PutDayRooms implements State.
func (m *MapState) PutDayRooms(appCode string, userID int64, day int64, rooms DayRooms) {
	m.Days[DayRoomsKey(appCode, userID, day)] = rooms.AppendBinary(nil)
}
