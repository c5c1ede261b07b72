package relay

import (
	"log/slog"
	"slices"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/kafkax"
)

// Mode is how the relay reads the outbox table: ModePoll or ModeBinlog.
type Mode string

const (
	// ModePoll reads the table with id-ordered SELECTs and tracks gaps
	// (the default; needs only SELECT).
	ModePoll Mode = "poll"
	// ModeBinlog reads the row binary log as a replica would (commit
	// order, no gaps, no polling load; needs the binlog settings and
	// replication privileges, see BinlogConfig).
	ModeBinlog Mode = "binlog"
)

// Config is everything a Relay needs besides its database: its settings,
// topics, Kafka cluster and observation hooks. New fills the defaults named
// below and validates it; the defaults equal roomflow's relay.* defaults.
type Config struct {
	// BatchSize is the most rows one batch (one Kafka transaction) reads.
	// Default 1000.
	BatchSize int
	// PollInterval is how long the relay sleeps when a read found nothing
	// new, and how often it looks every open gap up again. Default 100ms.
	PollInterval time.Duration
	// GapMaxAge is how long a skipped id (a gap) is waited for before it is
	// given up (a gap_abandoned record on DLQTopic). Default 1h.
	GapMaxAge time.Duration
	// MaxOpenGaps bounds the gaps remembered at once; the oldest is given
	// up first when it is reached. At most MaxOpenGapsFor(TransactionalID,
	// GapMaxAge), so the position always fits its record. Default 100000.
	MaxOpenGaps int
	// FailoverTimeout is how soon a standby takes over a dead leader: the
	// leader group's session timeout is two thirds of it (Kafka.SessionTimeout
	// is not used for that group), and it is the transaction timeout (at
	// least 10s). 1s to FailoverTimeoutLimit. Default 15s.
	FailoverTimeout time.Duration
	// TransactionalID names this relay: the Kafka transactional id, the key
	// of its position in OffsetsTopic and, with ".leader", its leader group
	// (LeaderGroup). Replicas sharing it are one relay. Required.
	TransactionalID string
	// MaxRecordBytes is the largest record relayed; a row whose record
	// would be larger goes to DLQTopic (payload_too_large). At most
	// MaxRecordBytesLimit. Default 1 MiB.
	MaxRecordBytes int
	// MaxBatchBytes bounds the payload bytes one batch reads from MySQL (a
	// larger row is read alone). Default 16 MiB.
	MaxBatchBytes int
	// Routes sends an event type to a topic of its own (event_type ->
	// topic); every other type goes to Topic. Optional.
	Routes map[string]string

	// Topic is where rows go unless Routes names another topic for their
	// event type (roomflow's kafka.topics.room_events). Required.
	Topic string
	// DLQTopic gets dead-lettered rows and abandoned gaps. Required.
	DLQTopic string
	// OffsetsTopic holds the relay's position (compacted; partition 0 is
	// the one read) and is the topic of the leader group. Required.
	OffsetsTopic string
	// ShutdownTimeout bounds finishing a commit on cancel, an abort, and
	// leaving the leader group. Default 10s.
	ShutdownTimeout time.Duration

	// Kafka is the cluster the relay's clients connect to (Brokers
	// required); its Metrics get the roomflow_kafka_* series of the
	// relay's clients, its Logger their franz-go warnings (nil: not
	// logged), its Extra options (TLS, SASL, a debug logger) apply to every
	// client before the options the relay's correctness depends on
	// (transactional id, partitioner, isolation, group settings).
	Kafka kafkax.Cluster
	// Registerer gets the roomflow_relay_* metrics; nil: not registered.
	Registerer prometheus.Registerer
	// Logger is the relay's logger (its lines carry component=relay); nil:
	// slog.Default().
	Logger *slog.Logger
	// InstanceID, when set, makes this replica a static member of the
	// leader group (KIP-345): restarted under the same id it leads again at
	// once instead of after the old session expires, and it does not leave
	// the group when it stops (its caller does, on a deliberate stop: see
	// kafkax.LeaveGroup). Unique among running replicas (a pod name).
	// Optional.
	InstanceID string
	// Hooks are observation and fault-injection points (tests,
	// benchmarks); zero: none.
	Hooks Hooks
	// Now is the clock of gap ages and lag; nil: time.Now.
	Now func() time.Time
	// Table is the table read, of room_outbox's shape; an unquoted MySQL
	// identifier. Default "room_outbox".
	Table string

	// Mode is how the table is read: ModePoll (default) or ModeBinlog.
	// Both modes commit the same records with the same guarantees, and a
	// relay switched between them continues from the other's position.
	Mode Mode
	// Binlog configures ModeBinlog; ignored in poll mode.
	Binlog BinlogConfig
}

// BinlogConfig configures binlog mode: the leader connects to MySQL as a
// replica and relays the INSERTs into Table from the row binary log.
type BinlogConfig struct {
	// DSN is the go-sql-driver DSN of the server whose binlog is read (its
	// address, user, password and TLS settings; roomflow:
	// relay.binlog.dsn, else mysql.dsn): the server of the relay's
	// database, checked at start. Its user needs REPLICATION SLAVE plus
	// REPLICATION CLIENT (MariaDB: BINLOG MONITOR), through its own grants
	// or its default role; its database part is not used, so a
	// least-privilege replication user needs nothing else. The snapshot and
	// column lookups use the relay's database. Required in binlog mode;
	// never logged.
	DSN string
	// ServerID is the server id the relay registers as a replica with. No
	// other replica or binlog client of the server may use it (the server
	// drops an older stream of the same id); the relay's own replicas
	// share it, as only the leader streams. Required in binlog mode, no
	// default: 1 to 4294967295.
	ServerID uint32
	// SnapshotFromID limits the first-start snapshot (no stored position)
	// to rows with id above it; 0: all rows.
	SnapshotFromID uint64
	// Resnapshot makes this process's binlog-mode leader sessions, until
	// one commits the snapshot's last batch, snapshot the rows the stored position has not relayed (ids above its
	// high-water id and its open holes) instead of streaming from its
	// binlog position, then stream from the snapshot's: the recovery from a
	// BinlogPurgedError (`roomflow relay --resnapshot`). Nothing is relayed
	// twice; rows of transactions that stayed open past relay.gap_max_age
	// before the purge may be missed, as in poll mode.
	Resnapshot bool
	// HeartbeatPeriod is how often the server sends a heartbeat on an idle
	// binlog, which advances the position of an idle table and bounds
	// roomflow_relay_lag_seconds. Default 1s.
	HeartbeatPeriod time.Duration
}

// Defaults of Config, equal to roomflow's relay.* and shutdown.timeout
// defaults.
const (
	DefaultBatchSize       = 1000
	DefaultPollInterval    = 100 * time.Millisecond
	DefaultGapMaxAge       = time.Hour
	DefaultMaxOpenGaps     = 100000
	DefaultFailoverTimeout = 15 * time.Second
	DefaultMaxRecordBytes  = 1 << 20
	DefaultMaxBatchBytes   = 16 << 20
	DefaultShutdownTimeout = 10 * time.Second
	DefaultTable           = "room_outbox"
	DefaultMode            = ModePoll
	DefaultHeartbeatPeriod = time.Second
)

// Upper bounds of Config, beyond which a relay would start and never lead.
const (
	// FailoverTimeoutLimit: FailoverTimeout is the transaction timeout, and
	// brokers refuse one above transaction.max.timeout.ms (15 min by
	// default) with INVALID_TRANSACTION_TIMEOUT.
	FailoverTimeoutLimit = kafkax.MaxTransactionTimeout
	// MaxRecordBytesLimit: the producer's batches hold at least one record,
	// and franz-go refuses a batch bound above its max broker write bytes
	// (100 MiB, Kafka's socket.request.max.bytes default).
	MaxRecordBytesLimit = 100 << 20
)

func (c *Config) setDefaults() {
	cfgerr.Default(&c.BatchSize, DefaultBatchSize)
	cfgerr.Default(&c.PollInterval, DefaultPollInterval)
	cfgerr.Default(&c.GapMaxAge, DefaultGapMaxAge)
	cfgerr.Default(&c.MaxOpenGaps, DefaultMaxOpenGaps)
	cfgerr.Default(&c.FailoverTimeout, DefaultFailoverTimeout)
	cfgerr.Default(&c.MaxRecordBytes, DefaultMaxRecordBytes)
	cfgerr.Default(&c.MaxBatchBytes, DefaultMaxBatchBytes)
	cfgerr.Default(&c.ShutdownTimeout, DefaultShutdownTimeout)
	cfgerr.Default(&c.Logger, slog.Default())
	if c.Now == nil {
		c.Now = time.Now
	}
	cfgerr.Default(&c.Table, DefaultTable)
	cfgerr.Default(&c.Mode, DefaultMode)
	cfgerr.Default(&c.Binlog.HeartbeatPeriod, DefaultHeartbeatPeriod)
}

// Validate checks every setting, keyed by the field's snake-case name
// ("batch_size", "routes.<event_type>", "kafka.brokers"). A zero field
// is checked as the default New runs it with.
func (c Config) Validate() error {
	c.setDefaults()
	var v cfgerr.Checks
	v.Positive("batch_size", c.BatchSize)
	v.PositiveDuration("poll_interval", c.PollInterval)
	v.PositiveDuration("gap_max_age", c.GapMaxAge)
	v.Positive("max_open_gaps", c.MaxOpenGaps)
	v.PositiveDuration("failover_timeout", c.FailoverTimeout)
	if c.FailoverTimeout > 0 && (c.FailoverTimeout < time.Second || c.FailoverTimeout > FailoverTimeoutLimit) {
		v.Bad("failover_timeout", "must be between 1s and %s, the brokers' default transaction.max.timeout.ms (got %s)",
			FailoverTimeoutLimit, c.FailoverTimeout)
	}
	v.Set("transactional_id", c.TransactionalID)
	if c.MaxOpenGaps > 0 && c.GapMaxAge > 0 && c.TransactionalID != "" {
		if limit := MaxOpenGapsFor(c.TransactionalID, c.GapMaxAge); c.MaxOpenGaps > limit {
			v.Bad("max_open_gaps", "must be at most %d with gap_max_age %s (got %d): a position with more open gaps can exceed the %d bytes a position record may take",
				limit, c.GapMaxAge, c.MaxOpenGaps, positionValueLimit(c.TransactionalID))
		}
	}
	v.Positive("max_record_bytes", c.MaxRecordBytes)
	if c.MaxRecordBytes > MaxRecordBytesLimit {
		v.Bad("max_record_bytes", "must be at most %d, the largest produce request the Kafka client writes (got %d)",
			MaxRecordBytesLimit, c.MaxRecordBytes)
	}
	v.Positive("max_batch_bytes", c.MaxBatchBytes)
	types := make([]string, 0, len(c.Routes))
	for typ := range c.Routes {
		types = append(types, typ)
	}
	slices.Sort(types) // stable error text
	for _, typ := range types {
		if typ == "" {
			v.Bad("routes", "has an empty event_type")
			continue
		}
		v.Topic("routes."+typ, c.Routes[typ])
		if c.Routes[typ] == c.OffsetsTopic {
			v.Bad("routes."+typ, "must not be the offsets topic %q", c.OffsetsTopic)
		}
	}
	v.Topic("topic", c.Topic)
	v.Topic("dlq_topic", c.DLQTopic)
	v.Topic("offsets_topic", c.OffsetsTopic)
	if c.OffsetsTopic != "" && (c.OffsetsTopic == c.Topic || c.OffsetsTopic == c.DLQTopic) {
		v.Bad("offsets_topic", "must differ from topic and dlq_topic (got %q)", c.OffsetsTopic)
	}
	v.PositiveDuration("shutdown_timeout", c.ShutdownTimeout)
	v.Add(cfgerr.Under("kafka", nil, c.Kafka.Validate()))
	if c.Table != "" && !identifier(c.Table) {
		v.Bad("table", "must be an unquoted MySQL identifier, [A-Za-z0-9_$] (got %q)", c.Table)
	}
	switch c.Mode {
	case ModePoll:
	case ModeBinlog:
		c.Binlog.validate(&v)
	default:
		v.Bad("mode", "must be %q or %q (got %q)", ModePoll, ModeBinlog, c.Mode)
	}
	return v.Err()
}

// validate checks binlog mode's settings under "binlog.". The DSN's text
// never goes into an error: it holds the password.
func (b BinlogConfig) validate(v *cfgerr.Checks) {
	if b.ServerID == 0 {
		v.Bad("binlog.server_id", "is required in binlog mode: a server id (1-4294967295) that no other replica or binlog client of the MySQL server uses")
	}
	if b.DSN == "" {
		v.Bad("binlog.dsn", "is required in binlog mode")
	} else if _, err := mysql.ParseDSN(b.DSN); err != nil {
		v.Bad("binlog.dsn", "does not parse as a MySQL DSN")
	}
	v.PositiveDuration("binlog.heartbeat_period", b.HeartbeatPeriod)
	if b.HeartbeatPeriod > 0 && (b.HeartbeatPeriod < time.Millisecond || b.HeartbeatPeriod > 4294967*time.Second) {
		v.Bad("binlog.heartbeat_period", "must be between 1ms and 4294967s (got %s)", b.HeartbeatPeriod)
	}
}

// identifier reports whether s is safe to put into a query as a table name.
func identifier(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '$') {
			return false
		}
	}
	return s != ""
}
