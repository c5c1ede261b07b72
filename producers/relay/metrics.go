package relay

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyapp/roomflow/internal/promreg"
)

// metrics are the relay's own series (Kafka client series come from kprom
// as roomflow_kafka_*). All durations are in seconds.
type metrics struct {
	events         *prometheus.CounterVec // result: relayed|dead_lettered
	batches        *prometheus.CounterVec // result: committed|aborted
	lag            prometheus.GaugeFunc
	openGaps       prometheus.Gauge
	gapsAbandoned  *prometheus.CounterVec // reason: max_age|max_open_gaps
	restamped      *prometheus.CounterVec // reason: a RestampReason
	isLeader       prometheus.Gauge
	batchDuration  prometheus.Histogram
	commitDuration prometheus.Histogram
	batchBytes     prometheus.Histogram
	idReissue      prometheus.Gauge
	binlogPurged   prometheus.Gauge
}

// newMetrics registers the relay's series; lag is the value of
// roomflow_relay_lag_seconds, computed at scrape time (see lagWatch).
func newMetrics(reg prometheus.Registerer, lag func() float64) *metrics {
	buckets := prometheus.ExponentialBuckets(0.0005, 2, 16) // 0.5ms .. ~16s
	m := &metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomflow_relay_events_total",
			Help: "Outbox rows committed to Kafka by the relay, by result (relayed to their route, or dead_lettered).",
		}, []string{"result"}),
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomflow_relay_batches_total",
			Help: "Relay Kafka transactions, by result (committed or aborted).",
		}, []string{"result"}),
		lag: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "roomflow_relay_lag_seconds",
			Help: "Now minus occurred_at of the oldest committed room_outbox row the committed relay position has not relayed (above its high-water id or in an open gap); with none, now minus when that was last verified. Every replica exports it, standby included; it keeps growing while MySQL cannot be read or no leader commits.",
		}, lag),
		openGaps: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "roomflow_relay_open_gaps",
			Help: "Outbox ids below the high-water mark the relay is still waiting for.",
		}),
		gapsAbandoned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomflow_relay_gaps_abandoned_total",
			Help: "Outbox ids given up, by reason (max_age: older than relay.gap_max_age; max_open_gaps: evicted by the bound).",
		}, []string{"reason"}),
		restamped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomflow_relay_restamped_total",
			Help: "Outbox rows whose record carries the relay's time as its timestamp instead of occurred_at_ms (kept in the header and payload), by reason (not_positive; future: over 1h ahead of the relay's clock; refused_by_broker: INVALID_TIMESTAMP).",
		}, []string{"reason"}),
		isLeader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "roomflow_relay_is_leader",
			Help: "1 while this replica is the active relay, 0 on standby.",
		}),
		batchDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "roomflow_relay_batch_duration_seconds",
			Help:    "Time from the start of a batch's MySQL read to its transaction commit.",
			Buckets: buckets,
		}),
		commitDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "roomflow_relay_commit_duration_seconds",
			Help:    "Time to flush a batch's records and commit its Kafka transaction.",
			Buckets: buckets,
		}),
		batchBytes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "roomflow_relay_batch_bytes",
			Help:    "Payload bytes a batch read from MySQL (bounded by relay.max_batch_bytes, or one row alone).",
			Buckets: prometheus.ExponentialBuckets(1024, 4, 10), // 1 KiB .. 256 MiB
		}),
		idReissue: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "roomflow_relay_id_reissue_detected",
			Help: "1 while the outbox table's AUTO_INCREMENT is at or below the relayed high-water id (ids are being reissued, e.g. after a failover to a lagging replica) and the relay has stopped; 0 otherwise.",
		}),
		binlogPurged: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "roomflow_relay_binlog_purged",
			Help: "1 while binlog mode cannot continue because the server no longer has the binlog at the stored position (purged, or a file/offset position after a failover); recover with `roomflow relay --resnapshot`. 0 otherwise.",
		}),
	}
	m.events = promreg.Register(reg, m.events)
	m.batches = promreg.Register(reg, m.batches)
	m.lag = promreg.Register(reg, m.lag)
	m.openGaps = promreg.Register(reg, m.openGaps)
	m.gapsAbandoned = promreg.Register(reg, m.gapsAbandoned)
	m.restamped = promreg.Register(reg, m.restamped)
	m.isLeader = promreg.Register(reg, m.isLeader)
	m.batchDuration = promreg.Register(reg, m.batchDuration)
	m.commitDuration = promreg.Register(reg, m.commitDuration)
	m.batchBytes = promreg.Register(reg, m.batchBytes)
	m.idReissue = promreg.Register(reg, m.idReissue)
	m.binlogPurged = promreg.Register(reg, m.binlogPurged)
	for _, r := range []string{"relayed", "dead_lettered"} {
		m.events.WithLabelValues(r)
	}
	for _, r := range []string{"committed", "aborted"} {
		m.batches.WithLabelValues(r)
	}
	for _, r := range []AbandonReason{AbandonMaxAge, AbandonMaxOpenGaps} {
		m.gapsAbandoned.WithLabelValues(string(r))
	}
	for _, r := range []RestampReason{RestampNotPositive, RestampFuture, RestampRefused} {
		m.restamped.WithLabelValues(string(r))
	}
	return m
}
