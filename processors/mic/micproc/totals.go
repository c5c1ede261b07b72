package micproc

import (
	"strconv"
	"unsafe"

	"github.com/hyapp/roomflow/processors/mic"
	"github.com/hyapp/roomflow/processors/streams"
	"github.com/hyapp/roomflow/schemas/envelope"
	"github.com/hyapp/roomflow/schemas/userv1"
)

// Totals (issue 35): after a close, the user's current totals, kept in the
// state under mic.TotalsKey, are updated and published to the compacted
// topics Topics.DailyTotals and Topics.LifetimeTotals in the transaction of
// the close, so a committed total always equals the committed deltas. A
// partition keeps and publishes them only once `roomflow totals bootstrap`
// wrote its marker (mic.KeyTotalsBootstrap) with every user's totals from
// the MySQL facts: totals counted from 0 on a database with history would
// be wrong.

// totalsScratch is the reused memory of one close's published totals.
type totalsScratch struct {
	applied []int
	daily   userv1.UserMicDailyTotals
	life    userv1.UserMicLifetimeTotals
}

// userTotals is the totals value of the user whose session is closing,
// read once per close, by the close's first day-room read (the value
// holds the user's day-room sets) or by updateTotals. marked: the
// partition has its bootstrap marker (firstDay).
type userTotals struct {
	loaded, marked bool
	firstDay       int64
	app            string
	user           int64
	key            []byte
	slot           streams.Slot
	tot            mic.Totals
}

// userTotals returns the totals of (app, user), read on the first call of
// a close. A marker or value that does not decode sets s.err: the close
// does not happen (the event goes to the DLQ as corrupt_state, a timer
// close is skipped), since the value holds the day's room set.
func (s *storeState) userTotals(app string, user int64) *userTotals {
	u := &s.tot
	if u.loaded && u.user == user && u.app == app {
		return u
	}
	u.loaded, u.marked, u.app, u.user = true, false, app, user
	u.tot = mic.Totals{Days: u.tot.Days[:0]}
	mb, ok := s.store.Get(mic.KeyTotalsBootstrap)
	if !ok {
		return u
	}
	first, err := mic.DecodeBootstrapMarker(mb)
	if err != nil {
		s.err = stateError(mic.KeyTotalsBootstrap, err)
		return u
	}
	u.key = mic.AppendTotalsKey(u.key[:0], app, user)
	key := unsafe.String(unsafe.SliceData(u.key), len(u.key)) // put copies it
	b, ok, slot := s.store.GetSlot(key)
	u.slot = slot
	if ok {
		if err := mic.UnmarshalTotalsAlias(b, &u.tot); err != nil {
			s.err = stateError(key, err)
			return u
		}
	}
	u.marked, u.firstDay = true, first
	return u
}

// roomDays counts the days of t that keep their rooms.
func roomDays(t *mic.Totals) int {
	n := 0
	for i := range t.Days {
		if t.Days[i].RoomsKept {
			n++
		}
	}
	return n
}

// updateTotals adds out's deltas to the user's totals (read by the close's
// day-room reads, which also updated its rooms), writes the value and
// emits the totals. It returns an error only for a state value of a newer
// release (the partition stalls, as for the session state).
func (p *Processor) updateTotals(t streams.Task, st *storeState, out *mic.Output, wmMs int64) error {
	l := out.Ledger
	if p.cfg.Settings.DisableTotals || out.Lifetime == nil || l == nil || l.Lifetime == nil {
		return nil
	}
	u := st.userTotals(l.AppCode, l.UserId)
	if st.err != nil {
		return st.err
	}
	if !u.marked {
		return nil
	}
	s := &p.cfg.Settings
	w := mic.TotalsWindow{FirstDay: u.firstDay, RetentionMs: s.DayTotalsRetention.Milliseconds(), WatermarkMs: wmMs,
		Rooms: mic.Retention{DayRooms: s.DayRoomRetention}, OldestOpenDay: p.oldestOpenDay(t)}
	rooms := roomDays(&u.tot)
	p.tsc.applied = u.tot.Add(l.Daily, l.Lifetime, w, p.tsc.applied)
	if dropped := rooms - roomDays(&u.tot); dropped > 0 {
		p.m.pruned.WithLabelValues("day_rooms").Add(float64(dropped))
	}
	st.buf = u.tot.AppendBinary(st.buf[:0])
	st.put(&u.slot, unsafe.String(unsafe.SliceData(u.key), len(u.key)))
	p.emitTotals(t, out, &u.tot)
	return nil
}

// emitTotals writes the totals sc.applied names: one daily total per day
// still kept, and the lifetime total.
func (p *Processor) emitTotals(t streams.Task, out *mic.Output, tot *mic.Totals) {
	sc, lt := &p.tsc, out.Lifetime
	app, user := lt.AppCode, lt.UserId
	buf := t.Bytes()
	appB := t.StringBytes(app)
	userKey := buf.Append(len(app)+21, func(b []byte) []byte { return strconv.AppendInt(append(append(b, app...), ':'), user, 10) })
	hdrs := t.NewHeaders(4 * (1 + len(sc.applied)))
	put := func(topic string, key, eventID, eventType []byte, f *envelope.Framing, value []byte) {
		h := envelope.AppendHeadersAs(hdrs[:0:4], eventID, eventType, appB, f.Header())
		hdrs = hdrs[4:]
		r := t.NewRecord()
		r.Topic, r.Key, r.Value, r.Headers = topic, key, value, h
		t.Emit(r)
	}
	for i, at := range sc.applied {
		if at < 0 {
			p.m.totals.WithLabelValues("day_gone").Inc()
			continue
		}
		d, x := out.Daily[i], &tot.Days[at]
		id := buf.Append(len(typeDailyTotals)+len(d.MicSessionId)+12, func(b []byte) []byte {
			return append(append(append(append(append(b, typeDailyTotals...), ':'), d.MicSessionId...), ':'), d.StatDate...)
		})
		sc.daily = userv1.UserMicDailyTotals{EventId: arenaString(id),
			AppCode: app, UserId: user, StatDate: d.StatDate, SeatOccupiedMs: x.SeatOccupiedMs, MicOnlineMs: x.MicOnlineMs,
			SessionCount: x.SessionCount, RoomCount: x.RoomCount, FirstMicAtMs: x.FirstMicAtMs, LastMicAtMs: x.LastMicAtMs,
			UpdatedAtMs: d.UpdatedAtMs, MicSessionId: d.MicSessionId}
		key := buf.Append(len(userKey)+11, func(b []byte) []byte { return append(append(append(b, userKey...), ':'), d.StatDate...) })
		f := &p.fr.dailyTotals
		put(p.cfg.Topics.DailyTotals, key, id, typeDailyTotals, f,
			buf.Append(160+len(f.Prefix), func(b []byte) []byte { return mic.AppendDailyTotals(append(b, f.Prefix...), &sc.daily) }))
	}
	id := buf.Append(len(typeLifetimeTotals)+len(lt.MicSessionId)+1, func(b []byte) []byte {
		return append(append(append(b, typeLifetimeTotals...), ':'), lt.MicSessionId...)
	})
	sc.life = userv1.UserMicLifetimeTotals{EventId: arenaString(id),
		AppCode: app, UserId: user, SeatOccupiedMs: tot.SeatOccupiedMs, MicOnlineMs: tot.MicOnlineMs,
		SessionCount: tot.SessionCount, FirstMicAtMs: tot.FirstMicAtMs, LastMicAtMs: tot.LastMicAtMs,
		UpdatedAtMs: lt.UpdatedAtMs, MicSessionId: lt.MicSessionId}
	f := &p.fr.lifetimeTotals
	put(p.cfg.Topics.LifetimeTotals, userKey, id, typeLifetimeTotals, f,
		buf.Append(160+len(f.Prefix), func(b []byte) []byte { return mic.AppendLifetimeTotals(append(b, f.Prefix...), &sc.life) }))
}

// arenaString is b, which lives in the transaction's arena, as a string:
// the message holding it is encoded into the arena at once.
func arenaString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

var (
	typeDailyTotals    = []byte(mic.EventTypeDailyTotals)
	typeLifetimeTotals = []byte(mic.EventTypeLifetimeTotals)
)
