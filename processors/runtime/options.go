package runtime

import (
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Processor handles one input record of one partition.
//
// Process runs on the runtime's single processing goroutine, for one task at
// a time, in offset order per partition. It may read and write t.Store(),
// emit records with t.Emit and read time with t.Now. It must not keep rec or
// t after returning.
//
// Return nil on success; Reject(reason, err) or CorruptState(key, err) to
// send rec to the DLQ (what it emitted or wrote is discarded); any other
// error to undo rec and stall its partition alone, retrying rec after a
// back-off (see the package doc, Partition stalls).
type Processor interface {
	Process(t Task, rec *kgo.Record) error
}

// ProcessorFunc adapts a function to Processor.
type ProcessorFunc func(t Task, rec *kgo.Record) error

// Process calls f.
func (f ProcessorFunc) Process(t Task, rec *kgo.Record) error { return f(t, rec) }

// PunctuateFunc is a wall-clock timer callback of one task. now is the
// runtime clock's time at the tick; the task has consumed its input
// partition up to the last stable offset read at that tick. What it emits
// and writes commits in the open transaction like record output. A non-nil
// error undoes them; the punctuation is retried after a back-off, the
// partition's records keep flowing (Reject has no meaning here: there is no
// record to dead-letter, so skip what can never succeed, such as a corrupt
// value).
type PunctuateFunc func(t Task, now time.Time) error

// Option configures New.
type Option func(*options)

type punctuation struct {
	name     string
	interval time.Duration
	fn       PunctuateFunc
}

type options struct {
	input          string
	group          string
	txnID          string // empty: "<group>-<hostname>", filled in by New
	instanceID     string
	changelog      string
	dlq            string
	commitInterval time.Duration
	commitRecords  int
	punctuations   []punctuation
	clock          func() time.Time
	reg            prometheus.Registerer
	log            *slog.Logger
	clientOpts     []kgo.Opt
	lagInterval    time.Duration
	ttlSweep       time.Duration
	txnTimeout     time.Duration
	sessionTimeout time.Duration
	retryMin       time.Duration
	retryMax       time.Duration
	shutdown       time.Duration
}

func defaultOptions() options {
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	return options{
		commitInterval: 100 * time.Millisecond,
		commitRecords:  5000,
		clock:          time.Now,
		log:            slog.Default(),
		lagInterval:    10 * time.Second,
		ttlSweep:       time.Minute,
		txnTimeout:     30 * time.Second,
		sessionTimeout: 20 * time.Second,
		retryMin:       100 * time.Millisecond,
		retryMax:       10 * time.Second,
		shutdown:       10 * time.Second,
		clientOpts:     []kgo.Opt{kgo.ClientID("roomflow-" + host)},
	}
}

// Input sets the input topic (required). Keys must already be partitioned
// the way the processor's state is keyed.
func Input(topic string) Option { return func(o *options) { o.input = topic } }

// Group sets the consumer group id (required).
func Group(id string) Option { return func(o *options) { o.group = id } }

// TransactionalID sets this instance's transactional id. Default
// "<group>-<hostname>". Every live instance of a group needs its own id; a
// restarted instance that reuses its predecessor's id fences it and aborts
// its open transaction at once (instead of after the transaction timeout).
func TransactionalID(id string) Option { return func(o *options) { o.txnID = id } }

// InstanceID makes this instance a static member of the group
// (group.instance.id, KIP-345): restarted with the same id, it takes its
// partitions straight back instead of waiting for the session timeout of
// its predecessor and a rebalance. The id must be unique among the live
// instances of the group (a second one fences the first) and stable across
// restarts (the pod name). Closing does not leave the group: a stopped
// static member's partitions wait for the session timeout unless the
// caller leaves for it (kafkax.LeaveGroup). Default: a dynamic member.
func InstanceID(id string) Option { return func(o *options) { o.instanceID = id } }

// Changelog sets the compacted changelog topic of the task stores. It must
// have at least as many partitions as the input. Without it, Task.Store
// panics: the processor is stateless.
func Changelog(topic string) Option { return func(o *options) { o.changelog = topic } }

// DLQ sets the dead-letter topic for rejected records (required).
func DLQ(topic string) Option { return func(o *options) { o.dlq = topic } }

// CommitInterval bounds how long a transaction stays open after its first
// record or punctuation (default 100ms, process.commit_interval).
func CommitInterval(d time.Duration) Option { return func(o *options) { o.commitInterval = d } }

// CommitRecords commits once a transaction holds n input records (default
// 5000, process.commit_records).
func CommitRecords(n int) Option { return func(o *options) { o.commitRecords = n } }

// Punctuate registers a wall-clock timer run for every owned task every
// interval of the runtime clock, also when the partition receives nothing.
// The first run is one interval after the task is restored. A tick runs
// only once the task has consumed its input up to the last stable offset
// read at the tick (see the package doc, Timers), so it may come late.
func Punctuate(name string, interval time.Duration, fn PunctuateFunc) Option {
	return func(o *options) {
		o.punctuations = append(o.punctuations, punctuation{name: name, interval: interval, fn: fn})
	}
}

// Clock injects the time source of Task.Now, punctuations and store TTLs
// (default time.Now). Tests pass a controllable clock; the runtime checks
// due punctuations at least every CommitInterval of real time.
func Clock(now func() time.Time) Option { return func(o *options) { o.clock = now } }

// Registerer sets where the runtime's metrics are registered (default: none).
// Several runtimes may share one registerer; they are told apart by the
// processor label.
func Registerer(reg prometheus.Registerer) Option { return func(o *options) { o.reg = reg } }

// Logger sets the slog logger (default slog.Default()).
func Logger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// ClientOpts adds franz-go options (seed brokers, client id, hooks, ...),
// e.g. kafkax.NewCluster(cfg.Kafka, reg, log).Opts(component). The runtime adds the
// group, transactional id and isolation options itself.
func ClientOpts(opts ...kgo.Opt) Option {
	return func(o *options) { o.clientOpts = append(o.clientOpts, opts...) }
}

// LagInterval sets how often consumer lag per partition is computed with
// kadm (default 10s; <= 0 disables).
func LagInterval(d time.Duration) Option { return func(o *options) { o.lagInterval = d } }

// TTLSweepInterval sets how often expired store keys are deleted (with
// changelog tombstones) per task (default 1m).
func TTLSweepInterval(d time.Duration) Option { return func(o *options) { o.ttlSweep = d } }

// TransactionTimeout sets the broker-side transaction timeout (default 30s).
func TransactionTimeout(d time.Duration) Option { return func(o *options) { o.txnTimeout = d } }

// SessionTimeout sets the group session timeout (default 20s).
func SessionTimeout(d time.Duration) Option { return func(o *options) { o.sessionTimeout = d } }

// RetryBackoff bounds the back-off of a stalled partition (default 100ms
// doubling to 10s while the same record or punctuation keeps failing).
func RetryBackoff(min, max time.Duration) Option {
	return func(o *options) { o.retryMin, o.retryMax = min, max }
}

// ShutdownTimeout bounds the stop on context cancel: the final commit,
// then leaving the group with what is left (default 10s, shutdown.timeout).
func ShutdownTimeout(d time.Duration) Option { return func(o *options) { o.shutdown = d } }
