package mysqlsink

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyapp/roomflow/internal/mysqlerr"
	"github.com/hyapp/roomflow/internal/promreg"
)

// Metrics are the sink's Prometheus series (base units).
type Metrics struct {
	BatchRecords *prometheus.HistogramVec // roomflow_sink_batch_records
	TxnSeconds   *prometheus.HistogramVec // roomflow_sink_txn_duration_seconds{result}
	Records      *prometheus.CounterVec   // roomflow_sink_records_total{table,result}
	Rows         *prometheus.CounterVec   // roomflow_sink_fact_rows_total{table}
	Retries      *prometheus.CounterVec   // roomflow_sink_retries_total{reason}
	Fenced       prometheus.Counter       // roomflow_sink_fenced_total
	DLQ          *prometheus.CounterVec   // roomflow_sink_dlq_records_total{reason}
	Lag          *prometheus.GaugeVec     // roomflow_sink_lag_records{topic,partition}
	Claims       prometheus.Counter       // roomflow_sink_partition_claims_total
	Behind       prometheus.Counter       // roomflow_sink_records_behind_total
}

// NewMetrics registers the sink's metrics on reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		BatchRecords: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "roomflow_sink_batch_records",
			Help:    "Records per MySQL sink batch (one transaction).",
			Buckets: []float64{1, 10, 50, 100, 250, 500, 1000, 2000, 5000, 10000},
		}, nil),
		TxnSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "roomflow_sink_txn_duration_seconds",
			Help:    "Duration of one sink batch transaction, by result (committed, retry, fenced, failed).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}, []string{"result"}),
		Records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomflow_sink_records_total",
			Help: "Source events by consumption table and result: applied (new event_id) or deduplicated (already consumed).",
		}, []string{"table", "result"}),
		Rows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomflow_sink_fact_rows_total",
			Help: "Fact rows written (after per-batch pre-aggregation) by table.",
		}, []string{"table"}),
		Retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomflow_sink_retries_total",
			Help: "Whole-batch retries by reason (deadlock, lock_wait_timeout, duplicate_key, connection).",
		}, []string{"reason"}),
		Fenced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "roomflow_sink_fenced_total",
			Help: "Batches rejected because another instance claimed one of their partitions.",
		}),
		DLQ: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomflow_sink_dlq_records_total",
			Help: "Records that can never be applied, sent to the DLQ, by reason.",
		}, []string{"reason"}),
		Lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "roomflow_sink_lag_records",
			Help: "High watermark minus the next offset stored in MySQL, per partition.",
		}, []string{"topic", "partition"}),
		Claims: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "roomflow_sink_partition_claims_total",
			Help: "Partitions claimed in roomflow_sink_offsets on assignment.",
		}),
		Behind: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "roomflow_sink_records_behind_total",
			Help: "Records skipped because their offset was below the one stored in MySQL (already applied).",
		}),
	}
	// Two sinks on one registry (tests, one process per partition set)
	// share their series instead of panicking.
	m.BatchRecords, m.TxnSeconds = promreg.Register(reg, m.BatchRecords), promreg.Register(reg, m.TxnSeconds)
	m.Records, m.Rows, m.Retries = promreg.Register(reg, m.Records), promreg.Register(reg, m.Rows), promreg.Register(reg, m.Retries)
	m.Fenced, m.DLQ, m.Lag = promreg.Register(reg, m.Fenced), promreg.Register(reg, m.DLQ), promreg.Register(reg, m.Lag)
	m.Claims, m.Behind = promreg.Register(reg, m.Claims), promreg.Register(reg, m.Behind)
	// Series at 0 before the first event, so rate() and increase() see it
	// (the DLQ reasons come from the appliers and appear with their first
	// record; "invalid" is the sink's own).
	m.BatchRecords.WithLabelValues()
	for _, r := range []string{"committed", "retry", "fenced", "failed"} {
		m.TxnSeconds.WithLabelValues(r)
	}
	for _, r := range mysqlerr.Reasons {
		m.Retries.WithLabelValues(r)
	}
	m.DLQ.WithLabelValues("invalid")
	return m
}

func (m *Metrics) observe(res Result) {
	m.Behind.Add(float64(res.Behind))
	for _, a := range res.Applied {
		m.Records.WithLabelValues(a.Consumed.Table, "applied").Add(float64(a.Consumed.Applied))
		m.Records.WithLabelValues(a.Consumed.Table, "deduplicated").Add(float64(a.Consumed.Deduplicated))
		for table, n := range a.FactRows {
			m.Rows.WithLabelValues(table).Add(float64(n))
		}
	}
}

func (m *Metrics) setLag(tp TP, lag int64) {
	m.Lag.WithLabelValues(tp.Topic, strconv.Itoa(int(tp.Partition))).Set(float64(max(lag, 0)))
}

func (m *Metrics) dropLag(tp TP) {
	m.Lag.DeleteLabelValues(tp.Topic, strconv.Itoa(int(tp.Partition)))
}
