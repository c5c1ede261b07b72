// Package micproc runs the mic domain (package mic) as a processor on the
// exactly-once runtime (processors/streams): input hyapp.user.mic-events.v1
// keyed by user_id, state in the runtime's changelog-backed store, outputs
// the mic ledger and the three public derived topics, and a wall-clock
// punctuation for the timer closes of the open session compensation
// (MIC-10, D-MIC-1).
//
// The input is read with mic.DecodeTrusted: its only writer, the room
// processor, checked the envelope and payload (their strings' UTF-8
// included), so that check is not repeated here.
//
// An input event without app_code belongs to the configured app_code (the
// rule of every stage, see mic.Decode), so its facts equal those of an event
// naming it. Every input record yields, inside the input's transaction:
//   - a record it cannot decode: the DLQ (reason from mic.DecodeError);
//   - a duplicate event_id of its session: nothing;
//   - anything else: exactly one MicLedgerEntry on the ledger topic, plus on
//     a close one UserMicSessionClosed, one UserMicDailyStatsUpdated per
//     touched UTC day and one UserMicLifetimeStatsUpdated; and, once the
//     partition's totals are bootstrapped (totals.go), the user's full
//     UserMicDailyTotals per touched day still kept and UserMicLifetimeTotals.
//
// All records are keyed by user_id (decimal) and carry the headers
// event_id, event_type, app_code and content-type application/x-protobuf.
//
// State keys (see mic.SessionID.Key, mic.DayRoomsKey, mic.KeyWatermark):
// one per session (open, or closed as a compact tombstone), one per user
// and UTC day listing the rooms already counted in room_count, the
// partition's event-time watermark, one per user with totals and the
// partition's totals bootstrap marker (mic.TotalsKey, mic.KeyTotalsBootstrap).
// Tombstones and day-room sets are dropped by the timer scan once they fall
// out of mic.closed_session_retention and mic.day_room_retention measured
// in event time (see mic.Retention), not with the runtime's wall-clock TTL:
// an outage longer than a retention must not make the catch-up count rooms
// twice or forget closed sessions.
//
// Once a partition's totals are on (its marker, mic.totals_enabled), a
// user's day-room sets live in the user's totals value instead
// (mic.DayTotals.Rooms): a close reads and writes one key, not two, and
// the changelog gets one record for both. A day the value keeps no rooms
// for yet (written by the bootstrap, or before the marker) starts from its
// day-room key; the value drops a day's rooms at the user's next close once
// the same retention lets them go (the oldest open day from the last scan,
// lowered by every session opened since). With the totals turned off on a
// marked partition, the rooms the values kept still count.
//
// The timers need every open session of a partition. The runtime offers no
// restore hook, and an in-memory index kept beside the store would diverge
// from it when a transaction aborts (the store rolls back, the index would
// not). So each tick scans the partition's store once with Range, decoding
// only status and start times (mic.PeekTimer), and queues the sessions due
// at the tick, the longest overdue first. It closes them in batches of at
// most mic.compensation_batch_size, each batch its own transaction, back to
// back (runtime Task.MoreDue) until none due at the tick is left; only then
// does the timer wait for mic.compensation_interval (MIC-10: the next batch
// at once while overdue sessions remain). A batch pops its sessions from the
// queue and re-reads each from the store, so the queue is only a list of
// candidates: a session a real event closed meanwhile is skipped, and when
// the store no longer holds the previous batch's closes (its transaction
// aborted) or belongs to a new task, the queue is rebuilt by a new scan. The
// scan also feeds the open-sessions gauge.
//
// With Settings.DisableCompensation (mic.compensation_enabled=false,
// MIC-10's switch) no session is closed by a timer: open sessions stay open
// until their real down. The punctuation mic-retention then only prunes the
// state and feeds the gauges.
//
// Metrics (besides the runtime's roomflow_process_*):
// roomflow_mic_events_total{action,outcome,reason},
// roomflow_mic_late_events_total{reason}, roomflow_mic_timer_closes_total{reason},
// roomflow_mic_rejected_events_total{reason},
// roomflow_mic_session_duration_seconds{measure=seat_occupied|mic_online},
// roomflow_mic_open_sessions{status}, roomflow_mic_overdue_sessions,
// roomflow_mic_state_pruned_total{kind}. The counters count processing, so
// records reprocessed after an aborted transaction count again; the facts
// themselves are exactly once.
//
// NewRuntime builds the processor on its runtime from a Config; New builds
// the processor alone (for rttest.Driver):
//
//	rt, p, err := micproc.NewRuntime(micproc.Config{
//		Runtime: streams.Config{
//			Input:     "hyapp.user.mic-events.v1",
//			Group:     "roomflow-mic-processor",
//			Changelog: "hyapp.mic.state-changelog.v1",
//			DLQ:       "hyapp.room.events.dlq.v1",
//			Kafka:     kafkax.Cluster{Brokers: brokers},
//		},
//		Topics:  micproc.Topics{Ledger: ..., SessionClosed: ..., DailyStats: ..., LifetimeStats: ...},
//		AppCode: "hyapp",
//	})
package micproc

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/schemareg"
	"github.com/hyapp/roomflow/processors/mic"
	"github.com/hyapp/roomflow/processors/streams"
	"github.com/hyapp/roomflow/schemas/envelope"
)

// Name is the processor's name in metrics and logs.
const Name = "mic"

// Topics names the processor's output topics (all required).
type Topics struct {
	// Ledger receives one MicLedgerEntry per input event
	// (hyapp.user.mic-ledger.v1).
	Ledger string
	// SessionClosed receives UserMicSessionClosed.
	SessionClosed string
	// DailyStats receives UserMicDailyStatsUpdated.
	DailyStats string
	// LifetimeStats receives UserMicLifetimeStatsUpdated.
	LifetimeStats string
	// DailyTotals and LifetimeTotals receive UserMicDailyTotals and
	// UserMicLifetimeTotals (compacted; required unless
	// Settings.DisableTotals).
	DailyTotals, LifetimeTotals string
	// Frames frames the public ones (kafka.public_wire_format); zero: plain.
	Frames schemareg.Frames
	// CompensationName names the compensation punctuation in metrics and
	// logs. Default PunctuationCompensation.
	CompensationName string
}

// Punctuation names: the timer closes, or, with compensation disabled, the
// state pruning alone.
const (
	PunctuationCompensation = "mic-compensation"
	PunctuationRetention    = "mic-retention"
)

// Settings are the processor's knobs (MIC-10's open session compensation
// and the state retention).
type Settings struct {
	// Policy holds the timer's max ages: PendingPublishMaxAge, default 2m,
	// and PublishingSessionMaxAge, default 12h.
	Policy mic.Policy
	// DisableCompensation turns the timer closes off: open sessions stay
	// open until their real down, and the timer only prunes the state.
	// Default false: compensation runs (MIC-10's default).
	DisableCompensation bool
	// CompensationInterval is the timer's period. Default 60s.
	CompensationInterval time.Duration
	// CompensationBatchSize bounds the sessions one timer run closes per
	// partition (one transaction each). Default 100.
	CompensationBatchSize int
	// ClosedSessionRetention is how long, in event time, a closed
	// session's tombstone is kept. Default 7 days.
	ClosedSessionRetention time.Duration
	// DayRoomRetention is how long, in event time, after the end of a UTC
	// day a user's room set of that day is kept; at least 24h. Default 48h.
	DayRoomRetention time.Duration
	// DisableTotals turns the totals topics off (mic.totals_enabled=false):
	// no totals are kept or published. Default false.
	DisableTotals bool
	// DayTotalsRetention is how long, in event time, after the end of a
	// UTC day its daily totals are kept; at least PublishingSessionMaxAge
	// plus a day, so every close's days still have theirs. Default 72h.
	DayTotalsRetention time.Duration
}

// Config is everything New and NewRuntime need.
type Config struct {
	// Runtime is the runtime NewRuntime runs the processor on: Input (the
	// mic events keyed by user_id), Group, Changelog (the state store,
	// required), DLQ, commit bounds, Kafka and the rest (see
	// streams.Config; its defaults apply). Name defaults to Name ("mic");
	// NewRuntime adds the processor's timer to Punctuations. Its
	// Registerer also gets the processor's metrics (nil: none) and its
	// Logger the processor's logs (nil: slog.Default()), with New too.
	Runtime streams.Config
	// Topics are the output topics (required).
	Topics Topics
	// Settings tune the timer and the retention (defaults above).
	Settings Settings
	// AppCode is the app_code of an input event that carries none, the
	// rule of every stage; at most 32 bytes. Default "": such events go to
	// the DLQ.
	AppCode string
}

// maxAppCode bounds AppCode (the envelope contract's app_code column).
const maxAppCode = 32

func (c *Config) setDefaults() {
	cfgerr.Default(&c.Runtime.Name, Name)
	cfgerr.Default(&c.Topics.CompensationName, PunctuationCompensation)
	s := &c.Settings
	setDuration := func(d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		}
	}
	setDuration(&s.Policy.PendingPublishMaxAge, 2*time.Minute)
	setDuration(&s.Policy.PublishingSessionMaxAge, 12*time.Hour)
	setDuration(&s.CompensationInterval, 60*time.Second)
	if s.CompensationBatchSize == 0 {
		s.CompensationBatchSize = 100
	}
	setDuration(&s.ClosedSessionRetention, 7*24*time.Hour)
	setDuration(&s.DayRoomRetention, 48*time.Hour)
	setDuration(&s.DayTotalsRetention, 72*time.Hour)
}

// Validate reports the invalid fields of c with its defaults applied,
// keyed by their path in c: "topics.ledger",
// "settings.compensation_interval", "settings.policy.pending_publish_max_age",
// "app_code", and the runtime's under "runtime." ("runtime.changelog").
func (c Config) Validate() error {
	c.setDefaults()
	var ch cfgerr.Checks
	ch.Add(c.validateProcessor())
	ch.Set("runtime.changelog", c.Runtime.Changelog)
	ch.Add(cfgerr.Under("runtime", nil, c.Runtime.Validate()))
	return ch.Err()
}

// validateProcessor checks what New needs (not the runtime's fields).
func (c *Config) validateProcessor() error {
	var ch cfgerr.Checks
	t, s := c.Topics, c.Settings
	ch.Set("topics.ledger", t.Ledger)
	ch.Set("topics.session_closed", t.SessionClosed)
	ch.Set("topics.daily_stats", t.DailyStats)
	ch.Set("topics.lifetime_stats", t.LifetimeStats)
	ch.PositiveDuration("settings.policy.pending_publish_max_age", s.Policy.PendingPublishMaxAge)
	ch.PositiveDuration("settings.policy.publishing_session_max_age", s.Policy.PublishingSessionMaxAge)
	ch.PositiveDuration("settings.compensation_interval", s.CompensationInterval)
	ch.Positive("settings.compensation_batch_size", s.CompensationBatchSize)
	ch.PositiveDuration("settings.closed_session_retention", s.ClosedSessionRetention)
	ch.PositiveDuration("settings.day_room_retention", s.DayRoomRetention)
	if s.DayRoomRetention > 0 && s.DayRoomRetention < 24*time.Hour {
		ch.Bad("settings.day_room_retention", "must cover a whole UTC day, at least 24h (got %s)", s.DayRoomRetention)
	}
	if !s.DisableTotals {
		ch.Set("topics.daily_totals", t.DailyTotals)
		ch.Set("topics.lifetime_totals", t.LifetimeTotals)
	}
	ch.PositiveDuration("settings.day_totals_retention", s.DayTotalsRetention)
	if least := s.Policy.PublishingSessionMaxAge + 24*time.Hour; !s.DisableTotals && s.DayTotalsRetention > 0 && s.DayTotalsRetention < least {
		ch.Bad("settings.day_totals_retention", "must be at least the publishing max age plus a day, %s (got %s)", least, s.DayTotalsRetention)
	}
	if len(c.AppCode) > maxAppCode {
		ch.Bad("app_code", "must be at most %d bytes (got %d)", maxAppCode, len(c.AppCode))
	}
	_, err := newFramings(t, !s.DisableTotals) // keyed topics.frames
	ch.Add(err)
	return ch.Err()
}

// Processor is the mic processor: a streams.Processor plus its timer.
type Processor struct {
	cfg Config
	m   *metrics
	log *slog.Logger
	st  storeState // reused by every call (single processing goroutine)
	fr  framings   // of the public records
	// sc holds the messages of the Output being emitted (reused likewise;
	// an Output is encoded before the next event is handled).
	sc  mic.Scratch
	tsc totalsScratch // the totals of the close being emitted
	wm  watermark     // the watermark of the last store read
	// overdue is each partition's catch-up in progress (see Compensate).
	overdue map[int32]*overdue
	// oldestOpen is each partition's earliest start day of an open session
	// at its last scan (the day-room retention of the totals' rooms).
	oldestOpen map[int32]openDay
}

// openDay is a scan's oldest open day, valid while its store has not
// rolled back (an undone close may be open again).
type openDay struct {
	store     *streams.Store
	rollbacks uint64
	day       int64
}

// opened lowers t's partition's oldest open day to a session opened since
// the scan (an up may be late by days).
func (p *Processor) opened(t streams.Task, startMs int64) {
	part := t.Partition()
	if o, ok := p.oldestOpen[part]; ok && mic.DayOf(startMs) < o.day {
		o.day = mic.DayOf(startMs)
		p.oldestOpen[part] = o
	}
}

// oldestOpenDay is t's partition's earliest start day of an open session
// as its last scan saw it; math.MinInt64 (no room set expires) before a
// scan of the current store.
func (p *Processor) oldestOpenDay(t streams.Task) int64 {
	o, ok := p.oldestOpen[t.Partition()]
	if !ok || o.store != t.Store() || o.rollbacks != t.Store().Rollbacks() {
		return math.MinInt64
	}
	return o.day
}

// overdue is what one tick's scan found in a partition: the open sessions
// due at the tick and not closed yet, the longest overdue first, which the
// tick's catch-up closes batch by batch.
type overdue struct {
	store  *streams.Store  // the task store it was scanned from
	at     time.Time       // the tick
	due    []mic.Candidate // left to close
	counts openCounts      // open sessions, for the gauge
	// last is the session the previous batch closed last: still open in
	// the store, it tells that batch's transaction was aborted.
	last string
}

// New validates c's processor fields (Topics, Settings, AppCode; not the
// runtime's) and returns the processor alone, its metrics registered on
// c.Runtime.Registerer (nil: none): for rttest.Driver. NewRuntime runs it.
func New(c Config) (*Processor, error) {
	c.setDefaults()
	if err := c.validateProcessor(); err != nil {
		return nil, err
	}
	return newProcessor(c), nil
}

func newProcessor(c Config) *Processor {
	log := c.Runtime.Logger
	if log == nil {
		log = slog.Default()
	}
	fr, _ := newFramings(c.Topics, !c.Settings.DisableTotals) // validated
	return &Processor{cfg: c, m: newMetrics(c.Runtime.Registerer), log: log.With("component", "mic-processor"), overdue: map[int32]*overdue{},
		oldestOpen: map[int32]openDay{}, fr: fr}
}

// NewRuntime validates c and builds the mic processor and its runtime:
// c.Runtime with the processor's timer added to its punctuations, every
// Settings.CompensationInterval, Compensate (or, with DisableCompensation,
// Prune, and an INFO log saying so). It does not connect.
func NewRuntime(c Config) (*streams.Runtime, *Processor, error) {
	c.setDefaults()
	if err := c.Validate(); err != nil {
		return nil, nil, err
	}
	p := newProcessor(c)
	s := c.Settings
	timer := streams.Punctuation{Name: PunctuationRetention, Interval: s.CompensationInterval, Fn: p.Prune}
	if !s.DisableCompensation {
		timer = streams.Punctuation{Name: c.Topics.CompensationName, Interval: s.CompensationInterval, Fn: p.Compensate}
	} else {
		p.log.Info("mic session compensation disabled (mic.compensation_enabled=false): no timer closes, open sessions stay open until their down",
			"interval", s.CompensationInterval.String())
	}
	rc := c.Runtime
	rc.Punctuations = append(slices.Clip(rc.Punctuations), timer)
	rc.RejectReasons = append(slices.Clip(rc.RejectReasons), mic.DecodeReasons...)
	rt, err := streams.New(rc, p)
	if err != nil {
		return nil, nil, cfgerr.Under("runtime", nil, err)
	}
	return rt, p, nil
}

// Process handles one hyapp.user.mic-events.v1 record (streams.Processor).
// An undecodable record is rejected to the DLQ; so is a record whose
// session or day-room state value cannot be decoded (streams.CorruptState:
// DLQ reason corrupt_state, no facts written from a value no retry can
// fix).
func (p *Processor) Process(t streams.Task, rec *kgo.Record) error {
	ev, err := mic.DecodeTrusted(rec.Value, p.cfg.AppCode)
	if err != nil {
		var de *mic.DecodeError
		if errors.As(err, &de) {
			p.m.rejected.WithLabelValues(de.Reason).Inc()
			return streams.Reject(de.Reason, err)
		}
		return err
	}
	st := p.state(t)
	wm := p.watermark(t)
	var out mic.Output
	if ret := p.retention(); ret.TooOld(&ev, wm) {
		out = p.sc.SkipTooOld(&ev) // may replay a session already closed and forgotten
	} else {
		out = p.sc.Handle(st, &ev)
	}
	if st.err != nil {
		return fmt.Errorf("micproc: event %s: %w", ev.EventID, st.err)
	}
	p.advanceWatermark(t, wm, ev.OccurredAtMs)
	if !p.cfg.Settings.DisableTotals && out.Before == mic.StatusNone && out.After.Open() {
		p.opened(t, ev.OccurredAtMs) // only the totals' room sets need it
	}
	p.emit(t, ev.AppCode, ev.UserID, &out)
	if err := p.updateTotals(t, st, &out, wm); err != nil {
		return fmt.Errorf("micproc: event %s: %w", ev.EventID, err)
	}
	p.m.observe(ev.Action, &out)
	switch {
	case out.Outcome == mic.OutcomeSkipped && out.SkipReason == mic.SkipIncomplete:
		t.Log().Warn("incomplete mic event skipped", "event_id", ev.EventID, "event_type", ev.EventType,
			"room_id", ev.RoomID, "user_id", ev.UserID, "action", ev.Action)
	case out.Outcome == mic.OutcomeSkipped:
		t.Log().Debug("mic event skipped", "event_id", ev.EventID, "room_id", ev.RoomID,
			"mic_session_id", ev.MicSessionID, "action", ev.Action, "skip_reason", out.SkipReason)
	}
	return nil
}

// pruneLimit bounds the state keys one tick drops per partition (each is a
// changelog tombstone in the tick's transaction); the rest go next tick.
const pruneLimit = 10000

func (p *Processor) retention() mic.Retention {
	return mic.Retention{ClosedSession: p.cfg.Settings.ClosedSessionRetention, DayRooms: p.cfg.Settings.DayRoomRetention}
}

// Compensate is the timer (streams.PunctuateFunc): it closes the open
// sessions of t's partition that are due at now, the longest overdue
// first, at most mic.compensation_batch_size of them per run. While due
// sessions remain it calls t.MoreDue, so the runtime commits and runs it
// again at once with the same now (a catch-up); the first run of a tick
// scans the partition (see scan), the next ones pop the queue it built. A
// state value it cannot decode is logged and skipped, never a failed run.
// The runtime runs it only once the partition is consumed up to the last
// stable offset read at the tick, so a session whose real events wait in
// the partition is never closed by the timer.
func (p *Processor) Compensate(t streams.Task, now time.Time) error {
	part := t.Partition()
	q := p.continued(t, now)
	if q == nil {
		for k, o := range p.overdue {
			if now.Sub(o.at) > p.cfg.Settings.CompensationInterval {
				delete(p.overdue, k) // a catch-up of a task since dropped
			}
		}
		q = p.scan(t, now)
		q.due = mic.SelectDue(q.due, now.UnixMilli(), -1)
		p.overdue[part] = q
	}
	if err := p.closeBatch(t, q, now); err != nil {
		return err
	}
	if len(q.due) > 0 {
		t.MoreDue()
	} else {
		delete(p.overdue, part)
	}
	p.m.setOpen(part, q.counts, len(q.due), now, p.cfg.Settings.CompensationInterval)
	return nil
}

// Prune is the timer with compensation disabled (streams.PunctuateFunc):
// the scan alone, dropping what fell out of retention and feeding the
// gauges; it closes nothing.
func (p *Processor) Prune(t streams.Task, now time.Time) error {
	q := p.scan(t, now)
	p.m.setOpen(t.Partition(), q.counts, len(q.due), now, p.cfg.Settings.CompensationInterval)
	return nil
}

// continued returns the catch-up of t's partition if this run continues
// it: the same tick, the same task store, and the previous batch's closes
// committed. Otherwise nil: the run scans.
func (p *Processor) continued(t streams.Task, now time.Time) *overdue {
	q := p.overdue[t.Partition()]
	if q == nil || q.store != t.Store() || !q.at.Equal(now) {
		return nil
	}
	if q.last != "" {
		if v, ok := t.Store().Get(q.last); ok {
			if s, err := mic.PeekTimer(v); err == nil && s.Status.Open() {
				t.Log().Info("mic compensation batch was rolled back; rescanning the partition", "mic_session_key", fmt.Sprintf("%x", q.last))
				return nil
			}
		}
	}
	return q
}

// scan reads every state key of t's partition once: it counts the open
// sessions, lists those due at now (unsorted), and drops the tombstones
// and day-room sets that fell out of their retention (at most pruneLimit
// of each per scan).
func (p *Processor) scan(t streams.Task, now time.Time) *overdue {
	nowMs := now.UnixMilli()
	pol := p.cfg.Settings.Policy
	ret := p.retention()
	wm := p.watermark(t)
	q := &overdue{store: t.Store(), at: now}
	var expired []string // tombstones out of retention
	type dayKey struct {
		key string
		day int64
	}
	var days []dayKey // day-room sets past their window, if no older session is open
	oldestOpenDay := int64(math.MaxInt64)
	t.Store().Range(func(key string, value []byte) bool {
		switch mic.KeyKind(key) {
		case mic.KindDayRooms:
			day, err := mic.ParseDayRoomsKey(key)
			if err != nil {
				corrupt(t, key, err)
				return true
			}
			if len(days) < pruneLimit && ret.DayRoomsExpired(day, math.MaxInt64, wm) {
				days = append(days, dayKey{key, day})
			}
			return true
		case mic.KindSession:
		default:
			return true
		}
		s, err := mic.PeekTimer(value)
		if err != nil {
			corrupt(t, key, err)
			return true
		}
		switch s.Status {
		case mic.StatusPendingPublish:
			q.counts.pending++
		case mic.StatusPublishing:
			q.counts.publishing++
		default:
			if len(expired) < pruneLimit && ret.TombstoneExpired(&s, wm) {
				expired = append(expired, key)
			}
			return true
		}
		oldestOpenDay = min(oldestOpenDay, mic.DayOf(s.SeatStartedAtMs))
		if at := pol.DueAtMs(&s); at < nowMs {
			q.due = append(q.due, mic.Candidate{Key: key, DueAtMs: at})
		}
		return true
	})
	for _, k := range expired {
		t.Store().Delete(k)
	}
	prunedDays := 0
	for _, d := range days {
		if ret.DayRoomsExpired(d.day, oldestOpenDay, wm) {
			t.Store().Delete(d.key)
			prunedDays++
		}
	}
	p.oldestOpen[t.Partition()] = openDay{store: t.Store(), rollbacks: t.Store().Rollbacks(), day: oldestOpenDay}
	p.m.pruned.WithLabelValues("closed_session").Add(float64(len(expired)))
	p.m.pruned.WithLabelValues("day_rooms").Add(float64(prunedDays))
	return q
}

// closeBatch pops at most mic.compensation_batch_size sessions from q and
// closes those still open and due at now. A close that reads a value it
// cannot decode is undone (Store.RollbackTo) and skipped with an ERROR
// line; one that reads a value of a newer release fails the run, which
// undoes the batch, as such a value stalls an event's partition.
func (p *Processor) closeBatch(t streams.Task, q *overdue, now time.Time) error {
	n := min(p.cfg.Settings.CompensationBatchSize, len(q.due))
	batch := q.due[:n]
	q.due, q.last = q.due[n:], ""
	pol := p.cfg.Settings.Policy
	st := p.state(t)
	wm := p.watermark(t)
	for _, c := range batch {
		st.begin()
		id, err := mic.ParseSessionKey(c.Key)
		if err != nil {
			corrupt(t, c.Key, err)
			continue
		}
		sp := t.Store().Savepoint()
		out, ok := p.sc.Compensate(st, pol, id, now.UnixMilli())
		if st.err != nil {
			// A value read after the close wrote another key (the first
			// day's room set, then a corrupt second day's): none of the
			// close's writes may stay, or a room would count as seen on a
			// day no fact counted it.
			t.Store().RollbackTo(sp)
			if errors.Is(st.err, envelope.ErrNewerVersion) {
				q.last = c.Key // open again once the run is undone: the next run rescans
				return st.err  // a newer release's value: the run fails, as an event's stalls its partition
			}
			corrupt(t, c.Key, st.err)
			continue
		}
		if !ok {
			continue // closed by its real events since the scan
		}
		p.emit(t, id.AppCode, id.UserID, &out)
		if err := p.updateTotals(t, st, &out, wm); err != nil {
			q.last = c.Key // open again once the run is undone: the next run rescans
			return err
		}
		p.m.observeTimer(&out)
		if out.Before == mic.StatusPendingPublish {
			q.counts.pending--
		} else {
			q.counts.publishing--
		}
		q.last = c.Key
		t.Log().Debug("timer closed a mic session", "event_id", out.Ledger.EventId, "mic_session_id", id.MicSessionID,
			"user_id", id.UserID, "room_id", out.Ledger.RoomId, "end_reason", out.Closed.EndReason)
	}
	return nil
}

// corrupt logs a state key or value the timer cannot decode and skips it:
// it can never succeed, and failing the timer would stall the partition.
// The session's next event goes to the DLQ as corrupt_state.
func corrupt(t streams.Task, key string, err error) {
	t.Log().Error("timer skips a corrupt state value", "key", fmt.Sprintf("%x", key), "error", err)
}

// emit writes the ledger entry and derived events of out.
func (p *Processor) emit(t streams.Task, appCode string, userID int64, out *mic.Output) {
	if out.Ledger == nil {
		return
	}
	n := 1 + len(out.Daily)
	if out.Closed != nil {
		n++
	}
	if out.Lifetime != nil {
		n++
	}
	// Records, headers, key and values live in the transaction's arena
	// (streams.Task.NewRecord, Task.Bytes): no garbage per record. The header values
	// other than event_id are shared (kgo never modifies them).
	hdrs := t.NewHeaders(4 * n)
	buf := t.Bytes()
	key := buf.Append(20, func(b []byte) []byte { return strconv.AppendInt(b, userID, 10) })
	app := t.StringBytes(appCode)
	i := 0
	put := func(topic, eventID string, eventType []byte, f *envelope.Framing, value []byte) {
		h := envelope.AppendHeadersAs(hdrs[4*i:4*i:4*i+4], t.StringBytes(eventID), eventType, app, f.Header())
		r := t.NewRecord()
		r.Topic, r.Key, r.Value, r.Headers = topic, key, value, h
		t.Emit(r)
		i++
	}
	tp := p.cfg.Topics
	ledgerType := typeLedgerCompensated
	if out.Ledger.EventType != mic.EventTypeMicSessionCompensated {
		ledgerType = t.StringBytes(out.Ledger.EventType)
	}
	put(tp.Ledger, out.Ledger.EventId, ledgerType, &plain,
		buf.Append(1024, func(b []byte) []byte { return mic.AppendLedger(b, out) }))
	if c, f := out.Closed, &p.fr.closed; c != nil { // a public record: its framing's prefix first
		put(tp.SessionClosed, c.EventId, typeClosed, f,
			buf.Append(192+len(f.Prefix), func(b []byte) []byte { return mic.AppendSessionClosed(append(b, f.Prefix...), c) }))
	}
	for _, d := range out.Daily {
		put(tp.DailyStats, d.EventId, typeDaily, &p.fr.daily,
			buf.Append(160+len(p.fr.daily.Prefix), func(b []byte) []byte { return mic.AppendDailyStatsUpdated(append(b, p.fr.daily.Prefix...), d) }))
	}
	if l, f := out.Lifetime, &p.fr.lifetime; l != nil {
		put(tp.LifetimeStats, l.EventId, typeLifetime, f,
			buf.Append(160+len(f.Prefix), func(b []byte) []byte { return mic.AppendLifetimeStatsUpdated(append(b, f.Prefix...), l) }))
	}
}
