package streams

import (
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/kafkax"
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

// Punctuation is a wall-clock timer run for every owned task every
// Interval of the runtime clock, also when the partition receives nothing.
// The first run is one Interval after the task is restored. A tick runs
// only once the task has consumed its input up to the last stable offset
// read at the tick (see the package doc, Timers), so it may come late.
type Punctuation struct {
	// Name labels the timer in metrics (punctuations_total) and logs.
	Name string
	// Interval is the period of the timer (required, > 0).
	Interval time.Duration
	// Fn is the timer callback (required).
	Fn PunctuateFunc
}

// Config is everything New needs besides the Processor. The zero value of
// a field marked "default" takes that default (a negative duration or
// count is invalid unless said otherwise).
type Config struct {
	// Name names the processor: the processor label of the runtime's
	// metrics and logs, the DLQ stage header, and, as "<Name>-processor",
	// the component name of its Kafka clients (their client ids, the
	// franz-go logs' component). Required.
	Name string
	// Input is the input topic (required). Keys must already be
	// partitioned the way the processor's state is keyed.
	Input string
	// Group is the consumer group id (required).
	Group string
	// TransactionalID is this instance's transactional id. Default
	// "<Group>-<hostname>". Every live instance of a group needs its own
	// id; a restarted instance that reuses its predecessor's id fences it
	// and aborts its open transaction at once (instead of after the
	// transaction timeout).
	TransactionalID string
	// InstanceID makes this instance a static member of the group
	// (group.instance.id, KIP-345): restarted with the same id, it takes
	// its partitions straight back instead of waiting for the session
	// timeout of its predecessor and a rebalance. The id must be unique
	// among the live instances of the group (a second one fences the
	// first) and stable across restarts (the pod name). Closing does not
	// leave the group: a stopped static member's partitions wait for the
	// session timeout unless the caller leaves for it (kafkax.LeaveGroup).
	// Default "": a dynamic member.
	InstanceID string
	// Changelog is the compacted changelog topic of the task stores. It
	// must differ from Input and have at least as many partitions. Default
	// "": no store, Task.Store panics (the processor is stateless).
	Changelog string
	// DLQ is the dead-letter topic of rejected records (required).
	DLQ string
	// CommitInterval bounds how long a transaction stays open after its
	// first record or punctuation; below TransactionTimeout. Default 100ms.
	CommitInterval time.Duration
	// CommitRecords commits once a transaction holds that many input
	// records. Default 5000.
	CommitRecords int
	// Punctuations are the wall-clock timers of every task. Default none.
	Punctuations []Punctuation
	// Now is the time source of Task.Now, punctuations and store TTLs.
	// Default time.Now. Tests pass a controllable clock; the runtime checks
	// due punctuations at least every CommitInterval of real time.
	Now func() time.Time
	// Kafka is the cluster the runtime's clients connect to
	// (Cluster.Opts("<Name>-processor"): brokers, client id, kprom metrics,
	// franz-go logs, Extra options). Its SessionTimeout is the group
	// session, default 20s here (kgo's own default is longer). The runtime
	// adds the group, transactional id and isolation options itself.
	// Brokers are required.
	Kafka kafkax.Cluster
	// RejectReasons are the Reject reasons the processor can return:
	// their roomflow_process_dlq_total series exist at 0 from the start,
	// so increase() sees the first dead letter (ReasonCorruptState is
	// always included). A reason not listed is still counted. Optional.
	RejectReasons []string
	// Registerer gets the runtime's metrics. Default nil: no metrics.
	// Several runtimes may share one registerer; they are told apart by
	// the processor label.
	Registerer prometheus.Registerer
	// Logger gets the runtime's logs. Default slog.Default().
	Logger *slog.Logger
	// LagInterval is how often consumer lag per partition is computed
	// with kadm. Default 10s; negative disables it.
	LagInterval time.Duration
	// TTLSweepInterval is how often expired store keys are deleted (with
	// changelog tombstones) per task. Default 1m.
	TTLSweepInterval time.Duration
	// TransactionTimeout is the broker-side transaction timeout, at most
	// kafkax.MaxTransactionTimeout. Default 30s.
	TransactionTimeout time.Duration
	// RetryBackoffMin is the first back-off of a stalled partition (and of
	// a failed commit); it doubles while the same record or punctuation
	// keeps failing. Each wait is jittered between half the back-off and
	// the back-off, so partitions that failed together do not retry in
	// step. Default 100ms.
	RetryBackoffMin time.Duration
	// RetryBackoffMax bounds that back-off; at least RetryBackoffMin.
	// Default 10s.
	RetryBackoffMax time.Duration
	// ShutdownTimeout bounds the stop on context cancel: the final commit,
	// then leaving the group with what is left. Default 10s.
	ShutdownTimeout time.Duration
}

// Defaults of Config's zero fields.
const (
	defaultCommitInterval     = 100 * time.Millisecond
	defaultCommitRecords      = 5000
	defaultSessionTimeout     = 20 * time.Second
	defaultLagInterval        = 10 * time.Second
	defaultTTLSweepInterval   = time.Minute
	defaultTransactionTimeout = 30 * time.Second
	defaultRetryBackoffMin    = 100 * time.Millisecond
	defaultRetryBackoffMax    = 10 * time.Second
	defaultShutdownTimeout    = 10 * time.Second
)

// setDefaults fills the zero fields that have a default.
func (c *Config) setDefaults() {
	cfgerr.Default(&c.CommitInterval, defaultCommitInterval)
	cfgerr.Default(&c.CommitRecords, defaultCommitRecords)
	cfgerr.Default(&c.Kafka.SessionTimeout, defaultSessionTimeout)
	cfgerr.Default(&c.LagInterval, defaultLagInterval)
	cfgerr.Default(&c.TTLSweepInterval, defaultTTLSweepInterval)
	cfgerr.Default(&c.TransactionTimeout, defaultTransactionTimeout)
	cfgerr.Default(&c.RetryBackoffMin, defaultRetryBackoffMin)
	cfgerr.Default(&c.RetryBackoffMax, defaultRetryBackoffMax)
	cfgerr.Default(&c.ShutdownTimeout, defaultShutdownTimeout)
	if c.Now == nil {
		c.Now = time.Now
	}
	cfgerr.Default(&c.Logger, slog.Default())
	if c.TransactionalID == "" && c.Group != "" {
		host, _ := os.Hostname()
		if host == "" {
			host = "localhost"
		}
		c.TransactionalID = c.Group + "-" + host
	}
}

// Validate reports every invalid field of c with its defaults applied
// (a zero field with a default is valid), keyed by the field's snake-case
// name ("commit_interval", "kafka.brokers", "punctuations.<name>").
func (c Config) Validate() error {
	c.setDefaults()
	var ch cfgerr.Checks
	ch.Set("name", c.Name)
	ch.Set("input", c.Input)
	ch.Set("group", c.Group)
	ch.Set("dlq", c.DLQ)
	if c.Changelog != "" && c.Changelog == c.Input {
		ch.Bad("changelog", "must differ from input (%q)", c.Input)
	}
	ch.PositiveDuration("commit_interval", c.CommitInterval)
	// The broker aborts a transaction open longer than its timeout, and a
	// record's Task.Context ends at half of it (txn.context): past that
	// every lookup of the interval's tail would fail and stall its partition.
	if c.TransactionTimeout > 0 && c.CommitInterval > c.TransactionTimeout/2 {
		ch.Bad("commit_interval", "must be at most half the transaction timeout (%s): records later in a transaction get no time for their lookups (got %s)",
			c.TransactionTimeout/2, c.CommitInterval)
	}
	ch.Positive("commit_records", c.CommitRecords)
	for _, p := range c.Punctuations {
		if p.Interval <= 0 || p.Fn == nil {
			ch.Bad("punctuations."+p.Name, "needs a positive interval and a function (got %s)", p.Interval)
		}
	}
	ch.Add(cfgerr.Under("kafka", nil, c.Kafka.Validate()))
	ch.PositiveDuration("kafka.session_timeout", c.Kafka.SessionTimeout)
	ch.PositiveDuration("ttl_sweep_interval", c.TTLSweepInterval)
	ch.PositiveDuration("transaction_timeout", c.TransactionTimeout)
	if c.TransactionTimeout > kafkax.MaxTransactionTimeout {
		ch.Bad("transaction_timeout", "must be at most %s, the brokers' default transaction.max.timeout.ms (got %s)",
			kafkax.MaxTransactionTimeout, c.TransactionTimeout)
	}
	ch.PositiveDuration("retry_backoff_min", c.RetryBackoffMin)
	ch.PositiveDuration("retry_backoff_max", c.RetryBackoffMax)
	if c.RetryBackoffMax < c.RetryBackoffMin {
		ch.Bad("retry_backoff_max", "must be at least retry_backoff_min (%s, got %s)", c.RetryBackoffMin, c.RetryBackoffMax)
	}
	ch.PositiveDuration("shutdown_timeout", c.ShutdownTimeout)
	return ch.Err()
}

// clientName is the component name of the runtime's Kafka clients.
func (c *Config) clientName() string { return c.Name + "-processor" }

// clientOpts are the options of the session client: the cluster's (group
// session, connection, metrics, logs, Extra), then the runtime's own.
func (c *Config) clientOpts(own ...kgo.Opt) []kgo.Opt {
	opts := append(c.Kafka.GroupOpts(), c.Kafka.Opts(c.clientName())...)
	return append(opts, own...)
}
