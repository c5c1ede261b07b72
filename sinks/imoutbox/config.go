package imoutbox

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/sinks/tencentim"
)

// Defaults of ServiceConfig, equal to roomflow's outbox_worker.* and
// shutdown.timeout defaults.
const (
	DefaultPollInterval           = time.Second
	DefaultBatchSize              = 100
	DefaultPublishTimeout         = 3 * time.Second
	DefaultClaimGrace             = 5 * time.Second
	DefaultLockTTL                = 30 * time.Second
	DefaultLanes                  = 64
	DefaultDrainTimeout           = 10 * time.Second
	DefaultFailureSummaryInterval = 30 * time.Second
	DefaultScanFallbackAfter      = time.Minute
	DefaultScanFallbackRetry      = 3 * time.Second
)

// ServiceConfig configures a Service: the delivery of claimed room_outbox
// rows that both paths share, and the compensation scan. NewService fills
// the defaults, then validates. IM-8's rule holds for PollInterval,
// BatchSize and PublishTimeout: a value <= 0 is the default (never a busy
// loop, never a full scan, never an unbounded call).
type ServiceConfig struct {
	// NodeID names this worker in room_outbox.worker_id (a random suffix
	// is added per process). Default: the host name.
	NodeID string
	// GroupIDPrefix is prepended to room_id to name the IM group: printable
	// ASCII of at most tencentim.MaxGroupIDBytes-1 bytes when delivering.
	// Default "" (the group id is the room id).
	GroupIDPrefix string
	// PollInterval is the compensation scan's period. <= 0:
	// DefaultPollInterval (1s).
	PollInterval time.Duration
	// BatchSize is the most rows one scan round claims. <= 0:
	// DefaultBatchSize (100).
	BatchSize int
	// PublishTimeout bounds one send. <= 0: DefaultPublishTimeout (3s).
	PublishTimeout time.Duration
	// RetryStrategy is "" or "fixed_interval" (the same: retryable rows
	// are claimed again by the next scan round); anything else is refused
	// (IM-8: fail at start).
	RetryStrategy string
	// ClaimGrace is how old a pending row must be before the scan claims
	// it, so the Kafka fast path gets it first; at least FastPathDelay in
	// a Publisher. Default DefaultClaimGrace (5s).
	ClaimGrace time.Duration
	// LockTTL is how long a claim (status delivering) holds before another
	// worker may take the row over; it must exceed PublishTimeout. Default
	// DefaultLockTTL (30s).
	LockTTL time.Duration
	// MarkPermanentFailed marks rows failed on a permanent error instead of
	// retrying them on the fixed interval. Default false (IM-5; D-IM-1).
	MarkPermanentFailed bool
	// Lanes bounds the rooms published concurrently. Default DefaultLanes
	// (64).
	Lanes int
	// DrainTimeout bounds the whole stop after cancel: sends still in
	// flight then are cancelled and their rows left delivering, results no
	// longer recorded. Default DefaultDrainTimeout (10s).
	DrainTimeout time.Duration
	// FailureSummaryInterval is how often repeated publish failures are
	// summarized at WARN (see failureLog). Default
	// DefaultFailureSummaryInterval (30s).
	FailureSummaryInterval time.Duration
	// AppCode is the app_code an envelope without one belongs to (the rule
	// of every stage): clients see it in the message. Default "": such
	// envelopes keep an empty app_code.
	AppCode string
	// Registerer gets the roomflow_im_outbox_* metrics. Default nil: not
	// registered.
	Registerer prometheus.Registerer
	// Logger gets the service's lines. Default slog.Default().
	Logger *slog.Logger
}

// fallBack applies IM-8's rule: PollInterval, BatchSize and
// PublishTimeout <= 0 are their defaults. It is the rule's one home.
func (c *ServiceConfig) fallBack() {
	if c.PollInterval <= 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.BatchSize <= 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.PublishTimeout <= 0 {
		c.PublishTimeout = DefaultPublishTimeout
	}
}

func (c *ServiceConfig) setDefaults() {
	c.fallBack()
	cfgerr.Default(&c.ClaimGrace, DefaultClaimGrace)
	cfgerr.Default(&c.LockTTL, DefaultLockTTL)
	cfgerr.Default(&c.Lanes, DefaultLanes)
	cfgerr.Default(&c.DrainTimeout, DefaultDrainTimeout)
	cfgerr.Default(&c.FailureSummaryInterval, DefaultFailureSummaryInterval)
	cfgerr.Default(&c.Logger, slog.Default())
}

// Validate reports every invalid field, keyed by its snake-case name.
// PollInterval, BatchSize and PublishTimeout are never invalid (<= 0 is
// the default); LockTTL is compared with the PublishTimeout in effect.
func (c ServiceConfig) Validate() error {
	c.setDefaults()
	var ch cfgerr.Checks
	switch c.RetryStrategy {
	case "", "fixed_interval":
	default:
		ch.Bad("retry_strategy", "must be empty or fixed_interval (got %q)", c.RetryStrategy)
	}
	ch.PositiveDuration("claim_grace", c.ClaimGrace)
	ch.PositiveDuration("lock_ttl", c.LockTTL)
	if c.LockTTL > 0 && c.LockTTL <= c.PublishTimeout {
		ch.Bad("lock_ttl", "must exceed publish_timeout (%s), or a live claim could be stolen", c.PublishTimeout)
	}
	if c.Lanes < 0 {
		ch.Bad("lanes", "must be > 0, or 0 for the default (got %d)", c.Lanes)
	}
	ch.PositiveDuration("drain_timeout", c.DrainTimeout)
	if c.FailureSummaryInterval < 0 {
		ch.Bad("failure_summary_interval", "must be a positive duration, or 0 for the default (got %s)", c.FailureSummaryInterval)
	}
	return ch.Err()
}

// Config configures a Publisher (`roomflow publish-im`): the service's
// settings, and with delivery on, the Kafka fast path and the Tencent IM
// client. NewPublisher fills the defaults, then validates.
type Config struct {
	ServiceConfig

	// DisableDelivery switches delivery off as a whole: neither the fast
	// path nor the compensation scan runs, only the backlog gauges (rows
	// wait in room_outbox). IM, Kafka, Group, Topic and FastPathDelay are
	// then neither used nor validated. Default false: delivering.
	DisableDelivery bool
	// IM is the Tencent IM client's config (its SDKAppID and SecretKey
	// are required when delivering). A nil IM.Registerer or IM.Logger is
	// the publisher's Registerer, and its Logger under
	// component=publish-im.
	IM tencentim.Config
	// FastPathDelay is how long the fast path holds a consumed room event
	// (on its own monotonic clock) before claiming its row, at most 10m:
	// room-service publishes each event itself and marks the row
	// delivered, and the fast path must not race it. Default 0: claim at
	// once, for deployments whose room-service no longer publishes (roomflow
	// deploys with 3s).
	FastPathDelay time.Duration
	// Group is the fast path's consumer group. Required when delivering.
	Group string
	// Topic is the room events topic the fast path consumes. Required
	// when delivering.
	Topic string
	// Kafka is the cluster of Topic; its Metrics and Logger get the fast
	// path client's metrics and franz-go warnings (component=publish-im).
	// Its brokers are required when delivering.
	Kafka kafkax.Cluster
	// InstanceID makes the fast path's consumer a static member of Group
	// (group.instance.id): restarted with the same id it takes its
	// partitions straight back instead of waiting for its predecessor's
	// session timeout. Unique per running replica and stable across its
	// restarts (the pod name). Default "": a dynamic member.
	InstanceID string
	// ScanFallbackAfter is how long the fast path must have been out of
	// its consumer group (no group session: Kafka unreachable for a
	// session timeout, or never reached) before this replica competes for
	// the scan fallback's MySQL lock; the holder's compensation scan
	// claims every room at the full IM.MaxCallsPerSecond (see
	// scanFallback). At least the group session (Kafka.SessionTimeout,
	// kgo's 45s when 0), so a replica still joining its group never
	// competes. Default DefaultScanFallbackAfter (1m).
	ScanFallbackAfter time.Duration
	// DisableScanFallback switches the scan fallback off: without Kafka
	// the scan then claims nothing. Default false.
	DisableScanFallback bool
	// ScanFallbackRetry is how often a replica out of its group tries the
	// fallback lock; the holder confirms it every third of that. Default
	// DefaultScanFallbackRetry (3s).
	ScanFallbackRetry time.Duration
	// PoolConns is the most open connections of the MySQL pool
	// (mysql.max_open_conns; NewPublisher reads its db's when 0). With the
	// scan fallback on it must be at least 2: the fallback holds its lock on
	// a connection of its own for as long as it is on, and the scan it turns
	// on needs another.
	PoolConns int
}

// validGroupIDPrefix reports whether prefix + a room id can be a Tencent
// group id: printable ASCII, leaving at least one byte for the room id.
func validGroupIDPrefix(prefix string) bool {
	if len(prefix) >= tencentim.MaxGroupIDBytes {
		return false
	}
	for i := 0; i < len(prefix); i++ {
		if prefix[i] < 0x20 || prefix[i] > 0x7e {
			return false
		}
	}
	return true
}

// kgoDefaultSession is kgo's group session when Kafka.SessionTimeout is 0.
const kgoDefaultSession = 45 * time.Second

// Validate reports every invalid field, keyed by its snake-case name; the
// IM client's are under "im." ("im.secret_key") and the cluster's under
// "kafka.", and like Group, Topic, FastPathDelay and GroupIDPrefix only
// checked when delivering.
func (c Config) Validate() error {
	var ch cfgerr.Checks
	ch.Add(c.validateOwn())
	if !c.DisableDelivery {
		ch.Add(cfgerr.Under("im", nil, c.IM.Validate()))
	}
	return ch.Err()
}

// validateOwn is Validate without the IM client's fields: NewPublisher
// leaves those to tencentim.New, which fills their defaults first.
func (c Config) validateOwn() error {
	c.ServiceConfig.setDefaults()
	var ch cfgerr.Checks
	ch.Add(c.ServiceConfig.Validate())
	if c.DisableDelivery {
		return ch.Err()
	}
	if c.FastPathDelay < 0 || c.FastPathDelay > 10*time.Minute {
		ch.Bad("fast_path_delay", "must be between 0 (claim at once) and 10m (got %s)", c.FastPathDelay)
	}
	if !validGroupIDPrefix(c.GroupIDPrefix) {
		ch.Bad("group_id_prefix", "must be printable ASCII of at most %d bytes: Tencent's group ids are at most %d, so no group could be named (got %d bytes)",
			tencentim.MaxGroupIDBytes-1, tencentim.MaxGroupIDBytes, len(c.GroupIDPrefix))
	}
	if c.ClaimGrace > 0 && c.ClaimGrace < c.FastPathDelay {
		ch.Bad("claim_grace", "must be at least fast_path_delay (%s), or the scan sends rows room-service is still publishing itself", c.FastPathDelay)
	}
	if !c.DisableScanFallback {
		session := c.Kafka.SessionTimeout
		if session <= 0 {
			session = kgoDefaultSession
		}
		after := c.ScanFallbackAfter
		if after == 0 {
			after = DefaultScanFallbackAfter
		}
		if after < session {
			ch.Bad("scan_fallback_after", "must be at least the consumer group session (%s), or a replica still joining its group would claim every room; 0 switches the fallback off (got %s)", session, c.ScanFallbackAfter)
		}
		if c.ScanFallbackRetry < 0 {
			ch.Bad("scan_fallback_retry", "must be a positive duration, or 0 for the default (got %s)", c.ScanFallbackRetry)
		}
		if c.PoolConns == 1 {
			ch.Bad("pool_conns", "must be at least 2 with the scan fallback on: its MySQL lock holds a connection while it is on, so the scan it turns on would never get one (got 1)")
		}
	}
	ch.Set("group", c.Group)
	ch.Set("topic", c.Topic)
	ch.Add(cfgerr.Under("kafka", nil, c.Kafka.Validate()))
	return ch.Err()
}
