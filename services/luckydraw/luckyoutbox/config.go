package luckyoutbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/backoff"
	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/schemareg"
)

// Defaults of Config, equal to roomflow's lucky.* defaults.
const (
	DefaultBatchSize           = 100
	DefaultPollInterval        = 500 * time.Millisecond
	DefaultMaxRetries          = 20
	DefaultLockTTL             = 30 * time.Second
	DefaultWalletCreditTimeout = 500 * time.Millisecond
	DefaultConcurrency         = 16
)

// Config configures a Worker. Zero values are the defaults; Topic and a
// way to Kafka (Kafka.Brokers or Producer) are required.
type Config struct {
	// AppCode is the app_code of outbox rows stored without one (their
	// app_code header and dispatch switch) and of Credit calls naming
	// none.
	AppCode string
	// BatchSize is the most rows one poll claims (lucky.outbox_batch_size).
	// Default 100.
	BatchSize int
	// PollInterval is the wait between polls that found less than a full
	// batch (lucky.outbox_poll_interval), and how far a reward is pushed
	// while wallet_credit_dispatch is off. Default 500ms.
	PollInterval time.Duration
	// MaxRetries is how many failed wallet calls make a reward failed
	// (lucky.outbox_max_retries). Default 20.
	MaxRetries int
	// LockTTL is a claim's lease (lucky.outbox_lock_ttl): a row still
	// processing after it is taken over by the next poll (a crashed
	// worker). It must outlast a whole batch's wallet calls. Default 30s.
	LockTTL time.Duration
	// WalletCreditTimeout bounds one wallet call
	// (lucky.wallet_credit_timeout). Default 500ms.
	WalletCreditTimeout time.Duration
	// Concurrency bounds the wallet calls one batch has in flight.
	// Default 16.
	Concurrency int
	// Backoff is the retry schedule of failed credits and produces.
	// Default: full jitter under 1s, 2s, 4s, ... 5m.
	Backoff backoff.Config
	// WorkerID names this process in lucky_outbox.worker_id. Default: the
	// host name plus a random suffix.
	WorkerID string
	// Topic is kafka.topics.lucky_events. Required.
	Topic string
	// Frames frames Topic's records at publish time
	// (kafka.public_wire_format); zero: plain, the stored payload.
	Frames schemareg.Frames
	// Kafka is the cluster the worker builds its producer on
	// (component lucky-outbox), closed by Close. Brokers are required
	// unless Producer is set.
	Kafka kafkax.Cluster
	// Producer, when set, is used instead of a client of Kafka, and not
	// closed by Close.
	Producer *kgo.Client
	// DispatchEnabled reads the wallet_credit_dispatch switch of an app.
	// false (or an error) leaves its rewards pending: nothing is called
	// and no attempt counted. Default nil: always on.
	DispatchEnabled func(ctx context.Context, appCode string) (bool, error)
	// Registerer gets the roomflow_lucky_outbox_* metrics. Default nil:
	// not registered.
	Registerer prometheus.Registerer
	// Logger gets the worker's lines (component=lucky-outbox). Default
	// slog.Default().
	Logger *slog.Logger
	// Now is the clock of every *_ms column. Default time.Now.
	Now func() time.Time
}

func (c *Config) setDefaults() {
	cfgerr.Default(&c.BatchSize, DefaultBatchSize)
	cfgerr.Default(&c.PollInterval, DefaultPollInterval)
	cfgerr.Default(&c.MaxRetries, DefaultMaxRetries)
	cfgerr.Default(&c.LockTTL, DefaultLockTTL)
	cfgerr.Default(&c.WalletCreditTimeout, DefaultWalletCreditTimeout)
	cfgerr.Default(&c.Concurrency, DefaultConcurrency)
	if c.WorkerID == "" {
		host, _ := os.Hostname()
		var b [3]byte
		_, _ = rand.Read(b[:])
		c.WorkerID = host + "-" + hex.EncodeToString(b[:])
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// batchCallTime is the longest a batch's wallet calls can take.
func (c Config) batchCallTime() time.Duration { return c.callTime(c.BatchSize) }

// callTime is the longest n rewards' wallet calls can take, Concurrency
// at a time.
func (c Config) callTime(n int) time.Duration {
	waves := (n + c.Concurrency - 1) / c.Concurrency
	return time.Duration(waves) * c.WalletCreditTimeout
}

// Validate reports every invalid field, keyed by its snake-case name.
func (c Config) Validate() error {
	c.setDefaults()
	var ch cfgerr.Checks
	ch.Positive("batch_size", c.BatchSize)
	ch.PositiveDuration("poll_interval", c.PollInterval)
	ch.Positive("max_retries", c.MaxRetries)
	ch.PositiveDuration("lock_ttl", c.LockTTL)
	ch.PositiveDuration("wallet_credit_timeout", c.WalletCreditTimeout)
	ch.Positive("concurrency", c.Concurrency)
	if c.BatchSize > 0 && c.Concurrency > 0 && c.WalletCreditTimeout > 0 && c.LockTTL > 0 && c.LockTTL <= 2*c.batchCallTime() {
		ch.Bad("lock_ttl", "must exceed twice a batch's wallet time (%s = ceil(batch_size/concurrency) x wallet_credit_timeout), or a live claim could be taken over", c.batchCallTime())
	}
	if len(c.WorkerID) > 64 {
		ch.Bad("worker_id", "must be at most 64 bytes (got %d)", len(c.WorkerID))
	}
	ch.Add(cfgerr.Under("backoff", nil, c.Backoff.Validate()))
	ch.Topic("topic", c.Topic)
	if c.Producer == nil {
		ch.Add(cfgerr.Under("kafka", nil, c.Kafka.Validate()))
	}
	return ch.Err()
}
