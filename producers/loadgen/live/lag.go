package live

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	dto "github.com/prometheus/client_model/go"
)

// Gauge is one value a LagSource may or may not know.
type Gauge struct {
	V  float64
	OK bool
}

func known(v float64) Gauge { return Gauge{V: v, OK: true} }

// Lag is how far each stage is behind the writer. A field a source does
// not know stays unset (shown "n/a").
type Lag struct {
	Relay     Gauge // seconds: roomflow_relay_lag_seconds
	Processor Gauge // records the slowest processor has not consumed (each reads every room event)
	Sink      Gauge // records the sink's group has not applied
	// DLQ is records dead-lettered: DLQCounter's during the run,
	// MetricsSource's since the processes started, KafkaSource's end
	// offsets an upper bound (transaction markers).
	DLQ Gauge
}

// or fills what l does not know from o.
func (l Lag) or(o Lag) Lag {
	pick := func(a, b Gauge) Gauge {
		if a.OK {
			return a
		}
		return b
	}
	return Lag{Relay: pick(l.Relay, o.Relay), Processor: pick(l.Processor, o.Processor), Sink: pick(l.Sink, o.Sink), DLQ: pick(l.DLQ, o.DLQ)}
}

// LagSource reads the pipeline's lag. Lag fails as a whole (an endpoint
// down, a broker unreachable, ctx done): the caller shows its values as
// "n/a" and asks again next tick.
type LagSource interface {
	Lag(ctx context.Context) (Lag, error)
}

// MetricsSource scrapes the /metrics endpoints of the roomflow processes
// (Prometheus text format): the relay's roomflow_relay_lag_seconds (the
// highest of its replicas), roomflow_process_consumer_lag_records summed
// per processor label (the slowest processor's), the sum of
// roomflow_sink_lag_records, and as DLQ the sum of roomflow_process_dlq_total,
// roomflow_sink_dlq_records_total and roomflow_relay_events_total
// {result="dead_lettered"}. A value no endpoint exports stays unset (a
// stage not scraped).
type MetricsSource struct {
	URLs   []string
	Client *http.Client // nil: http.DefaultClient (the tick's ctx bounds each scrape)
}

// Lag scrapes every URL; it fails if any of them fails, since a sum over
// the others would understate the lag.
func (m MetricsSource) Lag(ctx context.Context) (Lag, error) {
	var relay, sink, dlq []float64
	proc := map[string]float64{} // processor → its partitions' lag on every endpoint
	for _, u := range m.URLs {
		fams, err := m.scrape(ctx, u)
		if err != nil {
			return Lag{}, err
		}
		relay = append(relay, values(fams["roomflow_relay_lag_seconds"], nil)...)
		for _, series := range fams["roomflow_process_consumer_lag_records"].GetMetric() {
			proc[label(series, "processor")] += series.GetGauge().GetValue()
		}
		sink = append(sink, values(fams["roomflow_sink_lag_records"], nil)...)
		dlq = append(dlq, values(fams["roomflow_process_dlq_total"], nil)...)
		dlq = append(dlq, values(fams["roomflow_sink_dlq_records_total"], nil)...)
		dlq = append(dlq, values(fams["roomflow_relay_events_total"], map[string]string{"result": "dead_lettered"})...)
	}
	var l Lag
	if len(relay) > 0 {
		l.Relay = known(slices.Max(relay))
	}
	if len(proc) > 0 {
		l.Processor = known(slices.Max(slices.Collect(maps.Values(proc))))
	}
	l.Sink, l.DLQ = sum(sink), sum(dlq)
	return l, nil
}

func (m MetricsSource) scrape(ctx context.Context, url string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	// The text format: promhttp would otherwise answer in protobuf.
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	cl := m.Client
	if cl == nil {
		cl = http.DefaultClient
	}
	resp, err := cl.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("live: scrape %s: %s", req.URL.Redacted(), resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("live: scrape %s: %w", req.URL.Redacted(), err)
	}
	return fams, nil
}

func label(m *dto.Metric, name string) string {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == name {
			return lp.GetValue()
		}
	}
	return ""
}

// values are the gauge or counter values of f's series carrying every
// label of match.
func values(f *dto.MetricFamily, match map[string]string) []float64 {
	var out []float64
	for _, m := range f.GetMetric() {
		ok := true
		for k, v := range match {
			ok = ok && label(m, k) == v
		}
		switch {
		case !ok:
		case m.Gauge != nil:
			out = append(out, m.GetGauge().GetValue())
		case m.Counter != nil:
			out = append(out, m.GetCounter().GetValue())
		case m.Untyped != nil:
			out = append(out, m.GetUntyped().GetValue())
		}
	}
	return out
}

// sum is the total of v, unknown without values.
func sum(v []float64) Gauge {
	if len(v) == 0 {
		return Gauge{}
	}
	return known(sumOf(v))
}

func sumOf(v []float64) float64 {
	t := 0.0
	for _, x := range v {
		t += x
	}
	return t
}

// KafkaSource reads the lag from Kafka itself: the consumer-group lag
// (committed offset to partition end) of the slowest of the processors'
// groups and the sum of the sink's groups'. The sink's positions that
// count are in MySQL; its group's offsets are committed after them,
// informational, so they lag at most one batch behind. The DLQ count is
// DLQCounter's: end offsets would count transaction markers and the
// topic's whole life. A list left empty leaves its value unset.
type KafkaSource struct {
	Admin           *kadm.Client
	ProcessorGroups []string
	SinkGroups      []string
}

// Lag fails if describing a group or fetching its offsets fails.
func (k KafkaSource) Lag(ctx context.Context) (Lag, error) {
	var l Lag
	var err error
	if l.Processor, err = k.groupLag(ctx, k.ProcessorGroups, slices.Max); err != nil {
		return Lag{}, err
	}
	if l.Sink, err = k.groupLag(ctx, k.SinkGroups, sumOf); err != nil {
		return Lag{}, err
	}
	return l, nil
}

// groupLag combines the total lag of each of groups with by.
func (k KafkaSource) groupLag(ctx context.Context, groups []string, by func([]float64) float64) (Gauge, error) {
	if len(groups) == 0 {
		return Gauge{}, nil
	}
	lags, err := k.Admin.Lag(ctx, groups...)
	if err == nil {
		err = lags.Error()
	}
	if err != nil {
		return Gauge{}, fmt.Errorf("live: lag of groups %v: %w", groups, err)
	}
	var each []float64
	for _, g := range groups {
		gl, ok := lags[g]
		if !ok {
			return Gauge{}, errors.New("live: no lag for group " + g)
		}
		each = append(each, float64(gl.Lag.Total()))
	}
	return known(by(each)), nil
}

// DLQCounter counts the records dead-lettered while it runs, by reading
// the DLQ topics: their end offsets would count transaction markers too
// (every DLQ writer is transactional), about doubling a sparse DLQ.
type DLQCounter struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu  sync.Mutex
	n   int64
	err error // the last fetch error since the last Lag
}

// DLQConsumeOpts are the options of the client a DLQCounter reads with:
// topics read_committed (aborted records are not dead letters) from the
// first record stamped at or after since (the run's start: earlier runs'
// dead letters do not count; the writers' clocks are taken to agree), no
// group.
func DLQConsumeOpts(since time.Time, topics ...string) []kgo.Opt {
	return []kgo.Opt{kgo.ConsumeTopics(topics...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AfterMilli(since.UnixMilli()))}
}

// NewDLQCounter counts what cl (made with DLQConsumeOpts) consumes until
// Close.
func NewDLQCounter(cl *kgo.Client) *DLQCounter {
	ctx, cancel := context.WithCancel(context.Background())
	d := &DLQCounter{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(d.done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			if fs.IsClientClosed() {
				return
			}
			d.mu.Lock()
			d.n += int64(fs.NumRecords())
			fs.EachError(func(_ string, _ int32, err error) {
				if ctx.Err() == nil {
					d.err = err
				}
			})
			d.mu.Unlock()
		}
	}()
	return d
}

// Lag is the DLQ count so far; it fails once with a fetch error seen since
// the last call (the count goes on).
func (d *DLQCounter) Lag(context.Context) (Lag, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.err; err != nil {
		d.err = nil
		return Lag{}, fmt.Errorf("live: reading the DLQ: %w", err)
	}
	return Lag{DLQ: known(float64(d.n))}, nil
}

// Close stops counting; the client stays the caller's to close.
func (d *DLQCounter) Close() {
	d.cancel()
	<-d.done
}
