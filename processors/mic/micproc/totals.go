package micproc

import (
	"errors"
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

// totalsScratch is the reused memory of one close's totals.
type totalsScratch struct {
	tot     mic.Totals
	applied []int
	key     []byte
	daily   userv1.UserMicDailyTotals
	life    userv1.UserMicLifetimeTotals
}

// updateTotals adds out's deltas to the user's totals and emits them. It
// returns an error only for a state value of a newer release (the
// partition stalls, as for the session state); a corrupt totals value is
// logged and counted, and that user's totals are left alone.
func (p *Processor) updateTotals(t streams.Task, out *mic.Output, wmMs int64) error {
	l := out.Ledger
	if p.cfg.Settings.DisableTotals || out.Lifetime == nil || l == nil || l.Lifetime == nil {
		return nil
	}
	mb, ok := t.Store().Get(mic.KeyTotalsBootstrap)
	if !ok {
		return nil
	}
	first, err := mic.DecodeBootstrapMarker(mb)
	if err != nil {
		return p.totalsStateError(t, mic.KeyTotalsBootstrap, err)
	}
	st, sc := p.state(t), &p.tsc
	sc.key = mic.AppendTotalsKey(sc.key[:0], l.AppCode, l.UserId)
	key := unsafe.String(unsafe.SliceData(sc.key), len(sc.key)) // st.put copies it
	b, ok, slot := st.store.GetSlot(key)
	if ok {
		if err := mic.UnmarshalTotals(b, &sc.tot); err != nil {
			return p.totalsStateError(t, key, err)
		}
	} else {
		sc.tot = mic.Totals{Days: sc.tot.Days[:0]}
	}
	w := mic.TotalsWindow{FirstDay: first, RetentionMs: p.cfg.Settings.DayTotalsRetention.Milliseconds(), WatermarkMs: wmMs}
	sc.applied = sc.tot.Add(l.Daily, l.Lifetime, w, sc.applied)
	st.buf = sc.tot.AppendBinary(st.buf[:0])
	st.put(&slot, key)
	p.emitTotals(t, out)
	return nil
}

func (p *Processor) totalsStateError(t streams.Task, key string, err error) error {
	if errors.Is(err, envelope.ErrNewerVersion) {
		return stateError(key, err)
	}
	p.m.totals.WithLabelValues("corrupt_state").Inc()
	corrupt(t, key, err)
	return nil
}

// emitTotals writes the totals sc.applied names: one daily total per day
// still kept, and the lifetime total.
func (p *Processor) emitTotals(t streams.Task, out *mic.Output) {
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
		d, x := out.Daily[i], &sc.tot.Days[at]
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
	tot := &sc.tot
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
