package mysqlsink

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/obs"
)

// Defaults of Config and StoreConfig (the values of `roomflow sink`'s
// sink.*, kafka.topics.dlq and shutdown.timeout keys).
const (
	DefaultBatchSize       = 2000
	DefaultFlushInterval   = 50 * time.Millisecond
	DefaultGroup           = "roomflow-mysql-sink"
	DefaultMaxRetries      = 10
	DefaultDLQTopic        = "hyapp.room.events.dlq.v1"
	DefaultShutdownTimeout = 10 * time.Second
	DefaultParallelism     = 2
)

// maxOwnerID is the width of roomflow_sink_offsets.owner_id.
const maxOwnerID = 128

// maxGroup is the width of roomflow_sink_offsets.consumer_group
// (VARCHAR(128): characters): a longer group's claims fail with "Data too
// long" (1406) on a strict server and are truncated onto another group's
// rows on a lax one.
const maxGroup = 128

// Config configures a Sink (New). Only Kafka is required; every other zero
// value is either a default or "off".
type Config struct {
	// BatchSize is the most records one batch polls and applies (default
	// DefaultBatchSize).
	BatchSize int
	// FlushInterval is how long a batch waits for more records after its
	// first one (default DefaultFlushInterval).
	FlushInterval time.Duration
	// Group is the Kafka consumer group; it must equal the store's group,
	// which keys the offsets in roomflow_sink_offsets (default: the
	// store's group).
	Group string
	// MaxRetries is how many times a batch (or a claim) that failed with a
	// transient MySQL error is retried before Run returns the error
	// (default DefaultMaxRetries).
	MaxRetries int
	// DLQTopic receives the records an applier can never apply (default
	// DefaultDLQTopic).
	DLQTopic string
	// ShutdownTimeout bounds the drain when Run's context ends: the batch
	// in flight still gets this long to commit, and leaving the group as
	// long again (default DefaultShutdownTimeout).
	ShutdownTimeout time.Duration
	// Kafka is the cluster the sink consumes from and writes dead letters
	// to; required (Brokers). Its SessionTimeout is the group session, its
	// Metrics and Logger get the client's kprom series and franz-go
	// warnings; Kafka.Extra is applied after the sink's own client options,
	// so a test can override them.
	Kafka kafkax.Cluster
	// Registerer gets the sink's roomflow_sink_* metrics (nil: not
	// registered). Two sinks on one registry share their series.
	Registerer prometheus.Registerer
	// Logger gets the sink's lines, tagged component=sink (nil:
	// slog.Default()).
	Logger *slog.Logger
	// Health, when set, gets a readiness check named "sink" that fails
	// while the last batch failed (optional).
	Health *obs.Health
	// OwnerID is written to roomflow_sink_offsets for fencing: unique per
	// running instance, at most 128 bytes (default hostname-pid-random).
	OwnerID string
	// InstanceID makes the sink a static member of Group
	// (group.instance.id): restarted with the same id, it takes its
	// partitions straight back instead of waiting for its predecessor's
	// session timeout. Unique per running replica and stable across its
	// restarts (the pod name); empty (the default) keeps a dynamic member.
	// Fencing does not depend on it: every assignment, a static rejoin
	// included, claims the partitions in MySQL at a new generation.
	InstanceID string
	// Parallelism is how many transactions one batch may be split into, by
	// partition; 1 applies each batch in one transaction (default
	// DefaultParallelism).
	Parallelism int
	// Hooks stop the sink at chosen points as a crash would (tests;
	// optional).
	Hooks Hooks
}

// setDefaults fills the fields whose zero value is not a valid setting.
func (c *Config) setDefaults() {
	cfgerr.Default(&c.BatchSize, DefaultBatchSize)
	cfgerr.Default(&c.FlushInterval, DefaultFlushInterval)
	cfgerr.Default(&c.MaxRetries, DefaultMaxRetries)
	cfgerr.Default(&c.DLQTopic, DefaultDLQTopic)
	cfgerr.Default(&c.ShutdownTimeout, DefaultShutdownTimeout)
	cfgerr.Default(&c.Logger, slog.Default())
	if c.OwnerID == "" {
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = rand.Read(b[:])
		c.OwnerID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
	cfgerr.Default(&c.Parallelism, DefaultParallelism)
}

// Validate names the first problem of each field by its snake-case name
// ("batch_size", "kafka.brokers").
func (c Config) Validate() error {
	c.setDefaults()
	var v cfgerr.Checks
	v.Positive("batch_size", c.BatchSize)
	v.PositiveDuration("flush_interval", c.FlushInterval)
	v.Set("group", c.Group)
	v.Positive("max_retries", c.MaxRetries)
	v.Topic("dlq_topic", c.DLQTopic)
	v.PositiveDuration("shutdown_timeout", c.ShutdownTimeout)
	v.Add(cfgerr.Under("kafka", nil, c.Kafka.Validate()))
	if len(c.OwnerID) > maxOwnerID {
		v.Bad("owner_id", "must be at most %d bytes (got %d)", maxOwnerID, len(c.OwnerID))
	}
	v.Positive("parallelism", c.Parallelism)
	return v.Err()
}

// StoreConfig configures a Store (NewStore).
type StoreConfig struct {
	// Group is the consumer_group of the store's rows in
	// roomflow_sink_offsets: the sink's Kafka consumer group, at most 128
	// characters (default DefaultGroup).
	Group string
	// Appliers are the input topics' appliers, each made by Register; at
	// least one, and one per topic. The sink consumes exactly their topics.
	Appliers []Registration
}

func (c *StoreConfig) setDefaults() {
	cfgerr.Default(&c.Group, DefaultGroup)
}

// Validate names the problems by field: "group", "appliers".
func (c StoreConfig) Validate() error {
	c.setDefaults()
	var v cfgerr.Checks
	v.Set("group", c.Group)
	if n := utf8.RuneCountInString(c.Group); n > maxGroup {
		v.Bad("group", "must be at most %d characters, the width of roomflow_sink_offsets.consumer_group (got %d)", maxGroup, n)
	}
	if len(c.Appliers) == 0 {
		v.Bad("appliers", "must register at least one applier (mysqlsink.Register)")
	}
	seen := map[string]bool{}
	for i, r := range c.Appliers {
		if r.a == nil {
			v.Bad("appliers", "entry %d was not made by mysqlsink.Register", i)
			continue
		}
		t := r.a.Topic()
		switch {
		case t == "":
			v.Bad("appliers", "entry %d has no topic", i)
		case seen[t]:
			v.Bad("appliers", "more than one applier for topic %s", t)
		}
		seen[t] = true
	}
	return v.Err()
}
