package micproc

import (
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyapp/roomflow/internal/promreg"
	"github.com/hyapp/roomflow/processors/mic"
)

type openCounts struct{ pending, publishing int }

type partitionGauge struct {
	counts  openCounts
	overdue int
	at      time.Time
}

type metrics struct {
	events   *prometheus.CounterVec
	late     *prometheus.CounterVec
	timer    *prometheus.CounterVec
	rejected *prometheus.CounterVec
	pruned   *prometheus.CounterVec
	totals   *prometheus.CounterVec // totals not published, by reason
	duration *prometheus.HistogramVec

	eventCounters                eventCounters
	lateStale, lateClosed        prometheus.Counter
	seatDuration, onlineDuration prometheus.Observer
	mu                           sync.Mutex
	parts                        map[int32]partitionGauge
	open                         *prometheus.Desc
	overdueD                     *prometheus.Desc
	stale                        time.Duration
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomflow_mic_events_total",
			Help: "Mic input events by action and outcome (consumed, skipped, duplicate) and skip reason.",
		}, []string{"action", "outcome", "reason"}),
		late: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomflow_mic_late_events_total",
			Help: "Mic events that arrived too late to apply: session_already_closed or stale_event.",
		}, []string{"reason"}),
		timer: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomflow_mic_timer_closes_total",
			Help: "Open mic sessions closed by the compensation timer, by end reason.",
		}, []string{"reason"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomflow_mic_rejected_events_total",
			Help: "Mic input records sent to the DLQ because they could not be decoded, by reason.",
		}, []string{"reason"}),
		pruned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomflow_mic_state_pruned_total",
			Help: "Mic state dropped after its event-time retention, by kind: closed_session (tombstone keys), day_rooms (a user-day's room set: a day-room key at the timer's scan, or a day of a totals value at the user's next close).",
		}, []string{"kind"}),
		totals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomflow_mic_totals_not_published_total",
			Help: "Daily or lifetime totals a close did not publish: day_gone (a delta of a UTC day whose total fell out of mic.day_totals_retention or is older than the bootstrap). A totals value that does not decode is a corrupt state value (DLQ reason corrupt_state).",
		}, []string{"reason"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "roomflow_mic_session_duration_seconds",
			Help:    "Closed mic sessions' seat_occupied and mic_online time.",
			Buckets: []float64{1, 10, 30, 60, 300, 900, 1800, 3600, 7200, 14400, 28800, 43200, 86400},
		}, []string{"measure"}),
		parts: map[int32]partitionGauge{},
		open: prometheus.NewDesc("roomflow_mic_open_sessions",
			"Open mic sessions by status, as of the last compensation scan of each owned partition.", []string{"status"}, nil),
		overdueD: prometheus.NewDesc("roomflow_mic_overdue_sessions",
			"Open mic sessions due for a timer close and not closed yet: what the running catch-up has left (every due one with mic.compensation_enabled=false).", nil, nil),
	}
	// A second processor on the same registry shares the first one's
	// series (and its open-sessions collector).
	m.events = promreg.Register(reg, m.events)
	m.late = promreg.Register(reg, m.late)
	m.timer = promreg.Register(reg, m.timer)
	m.rejected = promreg.Register(reg, m.rejected)
	m.pruned = promreg.Register(reg, m.pruned)
	m.totals = promreg.Register(reg, m.totals)
	m.duration = promreg.Register(reg, m.duration)
	m.initCache()
	promreg.Register(reg, (*openCollector)(m))
	return m
}

func (m *metrics) initCache() {
	m.eventCounters = eventCounters{}
	m.lateStale, m.lateClosed = m.late.WithLabelValues(mic.SkipStale), m.late.WithLabelValues(mic.SkipAlreadyClosed)
	m.seatDuration = m.duration.WithLabelValues("seat_occupied")
	m.onlineDuration = m.duration.WithLabelValues("mic_online")
	m.precreate()
}

// skipReasons are the engine's skip reasons (user_mic_event_consumption).
var skipReasons = [...]string{mic.SkipIncomplete, mic.SkipUnknownSession, mic.SkipAlreadyClosed, mic.SkipStale, mic.SkipUnknownAction}

// precreate makes the counters exist at 0 for every label value known up
// front, so rate() and increase() (RoomflowMicIncompleteEvents) count the
// first event.
func (m *metrics) precreate() {
	for _, a := range actionLabels {
		for _, o := range []mic.Outcome{mic.OutcomeConsumed, mic.OutcomeDuplicate} {
			m.events.WithLabelValues(a, o.String(), "")
		}
	}
	for _, a := range append(actionLabels[:], "other") {
		for _, r := range skipReasons {
			m.events.WithLabelValues(a, mic.OutcomeSkipped.String(), r)
		}
	}
	for _, r := range []string{mic.SkipAlreadyClosed, mic.SkipStale} {
		m.late.WithLabelValues(r)
	}
	for _, r := range []string{mic.ReasonCompensatedPublishTimeout, mic.ReasonCompensatedPublishingWindow} {
		m.timer.WithLabelValues(r)
	}
	for _, r := range mic.DecodeReasons {
		m.rejected.WithLabelValues(r)
	}
	for _, k := range []string{"closed_session", "day_rooms"} {
		m.pruned.WithLabelValues(k)
	}
	for _, r := range []string{"day_gone"} {
		m.totals.WithLabelValues(r)
	}
}

// actionLabels are the action label values besides "other" (bounded
// label values: any other action counts as "other").
var actionLabels = [...]string{mic.ActionUp, mic.ActionPublishConfirmed, mic.ActionChange, mic.ActionDown}

// eventCounters caches roomflow_mic_events_total's series by the indexes
// of their label values (see eventCounter): a vec lookup, or a map keyed by
// the label strings, hashes every value on every event.
type eventCounters [len(actionLabels) + 1][mic.OutcomeDuplicate + 1][len(skipReasons) + 1]prometheus.Counter

// eventCounter is the events counter of action, outcome and skip reason.
func (m *metrics) eventCounter(action string, outcome mic.Outcome, reason string) prometheus.Counter {
	a := slices.Index(actionLabels[:], action)
	if a < 0 {
		a, action = len(actionLabels), "other"
	}
	r := 0
	if reason != "" {
		r = slices.Index(skipReasons[:], reason) + 1 // 0: unknown
	}
	if reason != "" && r == 0 || outcome > mic.OutcomeDuplicate { // not a value of the engine: never cached
		return m.events.WithLabelValues(action, outcome.String(), reason)
	}
	c := &m.eventCounters[a][outcome][r]
	if *c == nil {
		*c = m.events.WithLabelValues(action, outcome.String(), reason)
	}
	return *c
}

// observe counts one handled event; only the processing goroutine calls it.
func (m *metrics) observe(action string, out *mic.Output) {
	m.eventCounter(action, out.Outcome, out.SkipReason).Inc()
	switch out.SkipReason {
	case mic.SkipStale:
		m.lateStale.Inc()
	case mic.SkipAlreadyClosed:
		m.lateClosed.Inc()
	}
	m.closed(out)
}

func (m *metrics) observeTimer(out *mic.Output) {
	m.timer.WithLabelValues(out.Closed.EndReason).Inc()
	m.closed(out)
}

func (m *metrics) closed(out *mic.Output) {
	if out.Closed == nil {
		return
	}
	m.seatDuration.Observe(float64(out.Closed.SeatOccupiedMs) / 1000)
	m.onlineDuration.Observe(float64(out.Closed.MicOnlineMs) / 1000)
}

// setOpen records a partition's scan; partitions not scanned for three
// intervals (revoked) stop counting.
func (m *metrics) setOpen(part int32, c openCounts, overdue int, now time.Time, interval time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stale = 3 * interval
	m.parts[part] = partitionGauge{counts: c, overdue: overdue, at: now}
	for p, g := range m.parts {
		if now.Sub(g.at) > m.stale {
			delete(m.parts, p)
		}
	}
}

// openCollector exposes the open-session gauges summed over partitions.
type openCollector metrics

func (o *openCollector) Describe(ch chan<- *prometheus.Desc) { ch <- o.open; ch <- o.overdueD }

func (o *openCollector) Collect(ch chan<- prometheus.Metric) {
	o.mu.Lock()
	var c openCounts
	overdue := 0
	for _, g := range o.parts {
		c.pending += g.counts.pending
		c.publishing += g.counts.publishing
		overdue += g.overdue
	}
	o.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(o.open, prometheus.GaugeValue, float64(c.pending), mic.StatusPendingPublish.String())
	ch <- prometheus.MustNewConstMetric(o.open, prometheus.GaugeValue, float64(c.publishing), mic.StatusPublishing.String())
	ch <- prometheus.MustNewConstMetric(o.overdueD, prometheus.GaugeValue, float64(overdue))
}
