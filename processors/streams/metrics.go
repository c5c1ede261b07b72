package streams

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyapp/roomflow/internal/promreg"
)

// metrics are shared by every runtime on one registerer (processor label).
type metrics struct {
	recordsIn    *prometheus.CounterVec   // processor, topic
	recordsOut   *prometheus.CounterVec   // processor, topic
	dlq          *prometheus.CounterVec   // processor, reason
	txnDuration  *prometheus.HistogramVec // processor
	txnCommits   *prometheus.CounterVec   // processor
	txnAborts    *prometheus.CounterVec   // processor, cause
	restoreDur   *prometheus.HistogramVec // processor
	restoreRecs  *prometheus.CounterVec   // processor
	restoring    *prometheus.GaugeVec     // processor
	stateKeys    *prometheus.GaugeVec     // processor, partition
	stateBytes   *prometheus.GaugeVec     // processor, partition
	lag          *prometheus.GaugeVec     // processor, topic, partition (deprecated name)
	lagRecords   *prometheus.GaugeVec     // processor, topic, partition
	punctuations *prometheus.CounterVec   // processor, name
	deferred     *prometheus.CounterVec   // processor, reason
	stalled      *prometheus.GaugeVec     // processor, partition
	stalls       *prometheus.CounterVec   // processor, cause
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		recordsIn: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomflow_process_records_in_total",
			Help: "Input records processed in committed transactions, by processor and topic.",
		}, []string{"processor", "topic"}),
		recordsOut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomflow_process_records_out_total",
			Help: "Records emitted in committed transactions (changelog and DLQ included), by processor and topic.",
		}, []string{"processor", "topic"}),
		dlq: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomflow_process_dlq_total",
			Help: "Input records sent to the DLQ in committed transactions, by processor and reason.",
		}, []string{"processor", "reason"}),
		txnDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "roomflow_process_txn_duration_seconds",
			Help:    "Time from a transaction's first record to its end (commit or abort).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}, []string{"processor"}),
		txnCommits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomflow_process_txn_commits_total",
			Help: "Committed transactions.",
		}, []string{"processor"}),
		txnAborts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomflow_process_txn_aborts_total",
			Help: "Aborted transactions by cause (rebalance, restore, produce, flush, membership, unowned_partition, commit_error, silent_abort, shutdown).",
		}, []string{"processor", "cause"}),
		restoreDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "roomflow_process_restore_duration_seconds",
			Help:    "Time to restore a partition's state from its changelog.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 18),
		}, []string{"processor"}),
		restoreRecs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomflow_process_restore_records_total",
			Help: "Changelog records read while restoring (counted as they are read: restore progress).",
		}, []string{"processor"}),
		restoring: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "roomflow_process_restoring_partitions",
			Help: "Partitions whose state is being restored (not ready until 0).",
		}, []string{"processor"}),
		stateKeys: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "roomflow_process_state_keys",
			Help: "Committed keys in a task's state store.",
		}, []string{"processor", "partition"}),
		stateBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "roomflow_process_state_bytes",
			Help: "Committed key and value bytes in a task's state store.",
		}, []string{"processor", "partition"}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "roomflow_process_consumer_lag",
			Help: "Deprecated: use roomflow_process_consumer_lag_records (same value); removed in the next release.",
		}, []string{"processor", "topic", "partition"}),
		lagRecords: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "roomflow_process_consumer_lag_records",
			Help: "Records between the group's committed offset and the partition end (kadm), per input partition this instance owns.",
		}, []string{"processor", "topic", "partition"}),
		punctuations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomflow_process_punctuations_total",
			Help: "Punctuation runs by processor and name.",
		}, []string{"processor", "name"}),
		deferred: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomflow_process_punctuations_deferred_total",
			Help: "Punctuation ticks of a task deferred: behind (the task had not consumed its input up to the last stable offset read at the tick) or lso_unavailable (reading it failed).",
		}, []string{"processor", "reason"}),
		stalled: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "roomflow_process_partition_stalled",
			Help: "1 while a partition backs off alone after a record or punctuation failed (non-reject error), until it succeeds.",
		}, []string{"processor", "partition"}),
		stalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomflow_process_partition_stalls_total",
			Help: "Failed attempts that stalled a partition, by cause (record, punctuation).",
		}, []string{"processor", "cause"}),
	}
	m.recordsIn = promreg.Register(reg, m.recordsIn)
	m.recordsOut = promreg.Register(reg, m.recordsOut)
	m.dlq = promreg.Register(reg, m.dlq)
	m.txnDuration = promreg.Register(reg, m.txnDuration)
	m.txnCommits = promreg.Register(reg, m.txnCommits)
	m.txnAborts = promreg.Register(reg, m.txnAborts)
	m.restoreDur = promreg.Register(reg, m.restoreDur)
	m.restoreRecs = promreg.Register(reg, m.restoreRecs)
	m.restoring = promreg.Register(reg, m.restoring)
	m.stateKeys = promreg.Register(reg, m.stateKeys)
	m.stateBytes = promreg.Register(reg, m.stateBytes)
	m.lag = promreg.Register(reg, m.lag)
	m.lagRecords = promreg.Register(reg, m.lagRecords)
	m.punctuations = promreg.Register(reg, m.punctuations)
	m.deferred = promreg.Register(reg, m.deferred)
	m.stalled = promreg.Register(reg, m.stalled)
	m.stalls = promreg.Register(reg, m.stalls)
	return m
}

// abortCauses are the causes of roomflow_process_txn_aborts_total (see
// Runtime.aborted and prepareCommit).
var abortCauses = []string{"rebalance", "restore", "produce", "flush", "membership", "unowned_partition", "commit_error", "silent_abort", "shutdown"}

// precreate makes processor's counters (and its restoring gauge) exist at 0
// for every label value known up front, so rate() and increase() count
// their first event: a series that appears at 1 has no earlier sample.
func (m *metrics) precreate(processor string, rejectReasons []string) {
	for _, r := range append([]string{ReasonCorruptState, ReasonOutputTooLarge}, rejectReasons...) {
		m.dlq.WithLabelValues(processor, r)
	}
	for _, c := range abortCauses {
		m.txnAborts.WithLabelValues(processor, c)
	}
	for _, r := range []string{"behind", "lso_unavailable"} {
		m.deferred.WithLabelValues(processor, r)
	}
	for _, c := range []string{"record", "punctuation"} {
		m.stalls.WithLabelValues(processor, c)
	}
	m.txnCommits.WithLabelValues(processor)
	m.txnDuration.WithLabelValues(processor)
	m.restoreDur.WithLabelValues(processor)
	m.restoreRecs.WithLabelValues(processor)
	m.restoring.WithLabelValues(processor)
}

// setLag publishes a partition's lag under both names.
func (m *metrics) setLag(processor, topic, part string, v float64) {
	m.lag.WithLabelValues(processor, topic, part).Set(v)
	m.lagRecords.WithLabelValues(processor, topic, part).Set(v)
}

// deleteLag drops a partition's lag series (both names).
func (m *metrics) deleteLag(processor, topic, part string) {
	m.lag.DeleteLabelValues(processor, topic, part)
	m.lagRecords.DeleteLabelValues(processor, topic, part)
}
