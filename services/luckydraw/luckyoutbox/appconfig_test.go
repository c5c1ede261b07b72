package luckyoutbox_test

import (
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/cfgerr/cfgerrtest"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/services/luckydraw/luckyoutbox"
)

// The lucky.outbox_* defaults equal the worker's own; each key is named
// when refused.
func TestConfigFrom(t *testing.T) {
	cfg := config.Default()
	c, err := luckyoutbox.ConfigFrom(&cfg, luckyoutbox.Config{WorkerID: "w-1"})
	if err != nil || c.BatchSize != luckyoutbox.DefaultBatchSize || c.PollInterval != luckyoutbox.DefaultPollInterval ||
		c.MaxRetries != luckyoutbox.DefaultMaxRetries || c.LockTTL != luckyoutbox.DefaultLockTTL || c.WorkerID != "w-1" ||
		c.Topic != cfg.Kafka.Topics.LuckyEvents {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	for _, tc := range []struct {
		key string
		mut func(*config.Config)
	}{
		{"lucky.outbox_batch_size", func(c *config.Config) { c.Lucky.OutboxBatchSize = -1 }},
		{"lucky.outbox_poll_interval", func(c *config.Config) { c.Lucky.OutboxPollInterval = -1 }},
		{"lucky.outbox_max_retries", func(c *config.Config) { c.Lucky.OutboxMaxRetries = -1 }},
		{"lucky.outbox_lock_ttl", func(c *config.Config) { c.Lucky.OutboxLockTTL = config.Duration(time.Millisecond) }},
		{"lucky.wallet_credit_timeout", func(c *config.Config) { c.Lucky.WalletCreditTimeout = -1 }},
		{"kafka.topics.lucky_events", func(c *config.Config) { c.Kafka.Topics.LuckyEvents = "" }},
	} {
		cfg := config.Default()
		tc.mut(&cfg)
		_, err := luckyoutbox.ConfigFrom(&cfg, luckyoutbox.Config{})
		cfgerrtest.NamesKey(t, tc.key, err)
	}
}
