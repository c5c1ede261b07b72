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
	fromRoom := retention.Window{Age: w.Age, Replay: w.Replay + retention.RoomEventsFutureSkew}
	if c.UserMicEventConsumption != fromRoom || c.LuckyPoolInflowConsumption != fromRoom || c.LuckyEventConsumption != w ||
		c.RoomOutbox != (retention.RoomOutboxConfig{Age: retention.DefaultRoomOutboxAge}) ||
		c.BatchSize != retention.DefaultBatchSize || c.BatchPause != retention.DefaultBatchPause {
		t.Errorf("mapped %+v", c)
	}
	// The brokers' retention.ms raises a table's bound only for the topics it dedupes.
	c, _ = retention.ConfigFrom(&cfg, map[string]time.Duration{cfg.Kafka.Topics.LuckyEvents: 40 * 24 * time.Hour}, retention.Config{})
	if c.LuckyEventConsumption.Replay != 40*24*time.Hour || c.UserMicEventConsumption.Replay != fromRoom.Replay {
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

// The relay stamps a room event with its occurred_at_ms up to an hour
// ahead of its clock (relay.MaxFutureSkew), and Kafka keeps a segment
// until its newest timestamp is retention.ms old: such a record stays
// readable an hour after a window equal to retention.ms + segment.ms has
// purged its consumption row, and a replay then counts it twice. The
// tables fed from the room events need that hour more.
func TestConfigFromRoomEventsFutureSkew(t *testing.T) {
	cfg := config.Default()
	const kept = 336 * time.Hour // Kafka's defaults: 7 days of retention.ms and of segment.ms
	tp := cfg.Kafka.Topics
	replay := map[string]time.Duration{tp.RoomEvents: kept, tp.UserMicEvents: kept, tp.MicLedger: kept, tp.LuckyPoolInflow: kept, tp.LuckyEvents: kept}
	for _, w := range []*config.Duration{&cfg.Purge.UserMicEventConsumption, &cfg.Purge.LuckyPoolInflowConsumption, &cfg.Purge.LuckyEventConsumption} {
		*w = config.Duration(kept)
	}
	_, err := retention.ConfigFrom(&cfg, replay, retention.Config{})
	if got, want := cfgerr.Keys(err), []string{"purge.user_mic_event_consumption", "purge.lucky_pool_inflow_consumption"}; !slices.Equal(got, want) {
		t.Errorf("windows of retention.ms + segment.ms: keys %v, want %v (%v)", got, want, err)
	}
	for _, w := range []*config.Duration{&cfg.Purge.UserMicEventConsumption, &cfg.Purge.LuckyPoolInflowConsumption} {
		*w = config.Duration(kept + time.Hour)
	}
	if _, err := retention.ConfigFrom(&cfg, replay, retention.Config{}); err != nil {
		t.Errorf("windows an hour longer: %v", err)
	}
}
