package imoutbox

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyapp/roomflow/internal/promreg"
)

type metrics struct {
	claims       *prometheus.CounterVec
	events       *prometheus.CounterVec
	retries      *prometheus.CounterVec
	decodeErrors prometheus.Counter
	batchErrors  *prometheus.CounterVec
	pending      *prometheus.GaugeVec
	oldestAge    prometheus.Gauge
	lag          prometheus.Histogram
	claimBatch   *prometheus.HistogramVec
	held         prometheus.Gauge
	enabled      prometheus.Gauge
	fallback     prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomflow_im_outbox_claims_total",
			Help: "room_outbox claim results: source fast|scan, result claimed|done|busy|missing.",
		}, []string{"source", "result"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomflow_im_outbox_events_total",
			Help: "Claimed events by outcome: delivered|noop|retryable|failed|released|abandoned (send cancelled at the end of shutdown.timeout, row left delivering).",
		}, []string{"source", "outcome"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomflow_im_outbox_retries_total",
			Help: "Rows marked retryable (or failed) after a failed publish, by error code.",
		}, []string{"code"}),
		decodeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "roomflow_im_outbox_decode_errors_total",
			Help: "room_outbox payloads or Kafka values that are not an EventEnvelope.",
		}),
		batchErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomflow_im_outbox_batch_errors_total",
			Help: "Failed claim/mark/release/commit round trips (retried next round).",
		}, []string{"op"}),
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "roomflow_im_outbox_pending",
			Help: fmt.Sprintf("room_outbox rows not yet delivered to IM, by status, counted up to %d (the cap reads at least).", BacklogCountCap),
		}, []string{"status"}),
		oldestAge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "roomflow_im_outbox_oldest_pending_age_seconds",
			Help: "Age of the lowest-id pending/retryable/delivering room_outbox row.",
		}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "roomflow_im_delivery_lag_seconds",
			Help:    "From the event's occurred_at to its IM acceptance.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}),
		claimBatch: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "roomflow_im_outbox_claim_batch_size",
			Help:    "Events asked for per claim transaction (one round trip per poll or scan, not per event).",
			Buckets: []float64{1, 2, 5, 10, 25, 50, 100, 250, 500, 1000},
		}, []string{"source"}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "roomflow_im_fast_path_held_records",
			Help: "Room events the fast path holds for im.fast_path_delay before claiming them (bounded; polling pauses when full).",
		}),
		enabled: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "roomflow_im_delivery_enabled",
			Help: "1 when publish-im delivers (fast path and compensation scan), 0 when outbox_worker.enabled is false and nothing is delivered.",
		}),
		fallback: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "roomflow_im_scan_fallback",
			Help: "1 while this replica holds the scan fallback lock and its compensation scan claims every room at the full im.max_calls_per_second (its fast path out of its consumer group for im.scan_fallback_after: Kafka unreachable), else 0.",
		}),
	}
	m.claims = promreg.Register(reg, m.claims)
	m.fallback = promreg.Register(reg, m.fallback)
	m.held = promreg.Register(reg, m.held)
	m.enabled = promreg.Register(reg, m.enabled)
	m.claimBatch = promreg.Register(reg, m.claimBatch)
	m.events = promreg.Register(reg, m.events)
	m.retries = promreg.Register(reg, m.retries)
	m.decodeErrors = promreg.Register(reg, m.decodeErrors)
	m.batchErrors = promreg.Register(reg, m.batchErrors)
	m.pending = promreg.Register(reg, m.pending)
	m.oldestAge = promreg.Register(reg, m.oldestAge)
	m.lag = promreg.Register(reg, m.lag)
	m.precreate()
	return m
}

// precreate makes the series exist at 0 for every label value known up
// front, so rate() and increase() count the first event.
func (m *metrics) precreate() {
	for _, src := range []string{"fast", "scan"} {
		for _, r := range []string{"claimed", "done", "busy", "missing"} {
			m.claims.WithLabelValues(src, r)
		}
		for _, o := range []string{"delivered", "noop", StatusRetryable, StatusFailed, "released", "abandoned"} {
			m.events.WithLabelValues(src, o)
		}
		m.claimBatch.WithLabelValues(src)
	}
	for _, op := range []string{"claim", "mark", "release", "commit", "renew"} {
		m.batchErrors.WithLabelValues(op)
	}
	for _, st := range []string{StatusPending, StatusRetryable, StatusDelivering, StatusFailed} {
		m.pending.WithLabelValues(st)
	}
}
