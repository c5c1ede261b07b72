package retention_test

import (
	"slices"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/sinks/mysql/retention"
)

// The purge.* defaults equal the retention package's, pass its checks
// against the default kafka.topic_retention, and leave room_outbox alone.
func TestConfigFromDefaults(t *testing.T) {
	cfg := config.Default()
	c, err := retention.ConfigFrom(&cfg, nil, retention.Config{})
	if err != nil {
		t.Fatalf("defaults must pass purge's wiring: %v", err)
	}
	w := retention.Window{Age: retention.DefaultWindow, Replay: cfg.Kafka.TopicRetention.D()}
	if c.UserMicEventConsumption != w || c.LuckyPoolInflowConsumption != w || c.LuckyEventConsumption != w ||
		c.RoomOutbox != (retention.RoomOutboxConfig{Age: retention.DefaultRoomOutboxAge}) ||
		c.BatchSize != retention.DefaultBatchSize || c.BatchPause != retention.DefaultBatchPause {
		t.Errorf("mapped %+v", c)
	}
	// The brokers' retention.ms raises a table's bound only for the topics it dedupes.
	c, _ = retention.ConfigFrom(&cfg, map[string]time.Duration{cfg.Kafka.Topics.LuckyEvents: 40 * 24 * time.Hour}, retention.Config{})
	if c.LuckyEventConsumption.Replay != 40*24*time.Hour || c.UserMicEventConsumption.Replay != cfg.Kafka.TopicRetention.D() {
		t.Errorf("replay bounds %+v", c)
	}
	cfg.Purge.RoomOutbox.Enabled = true
	if _, err := retention.ConfigFrom(&cfg, nil, retention.Config{}); !slices.Equal(cfgerr.Keys(err), []string{"purge.room_outbox.enabled"}) {
		t.Errorf("room_outbox enabled without a relay bound: %v", err)
	}
}

// Every consumption table's replay reaches back through the topics whose
// reprocessing reproduces its event ids.
func TestReplayTopics(t *testing.T) {
	tp := config.Default().Kafka.Topics
	got := retention.ReplayTopics(tp)
	if !slices.Equal(got[retention.UserMicEventConsumption], []string{tp.MicLedger, tp.UserMicEvents, tp.RoomEvents}) ||
		!slices.Equal(got[retention.LuckyPoolInflowConsumption], []string{tp.LuckyPoolInflow, tp.RoomEvents}) ||
		!slices.Equal(got[retention.LuckyEventConsumption], []string{tp.LuckyEvents}) || len(got) != 3 {
		t.Errorf("replay topics %v", got)
	}
}
