package micproc_test

import (
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/cfgerr/cfgerrtest"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/processors/mic/micproc"
	"github.com/hyapp/roomflow/processors/streams"
)

// The defaults pass with the changelog and output topics mapped;
// mic.compensation_enabled maps negated; every mic key is named when
// refused.
func TestConfigFrom(t *testing.T) {
	def := config.Default()
	def.Mic.CompensationEnabled = false
	c, err := micproc.ConfigFrom(&def, streams.Config{}, "pod-1")
	if err != nil || c.Runtime.Name != micproc.Name || c.Runtime.Changelog != def.Kafka.Topics.MicStateChangelog ||
		c.Runtime.InstanceID != "pod-1-mic" || c.Topics.Ledger != def.Kafka.Topics.MicLedger || !c.Settings.DisableCompensation ||
		c.Topics.DailyTotals != def.Kafka.Topics.MicDailyTotals || c.Topics.LifetimeTotals != def.Kafka.Topics.MicLifetimeTotals ||
		c.Settings.DisableTotals || c.Settings.DayTotalsRetention != 72*time.Hour {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	for _, tc := range []struct {
		key string
		mut func(*config.Config)
	}{
		{"process.mic_group", func(c *config.Config) { c.Process.MicGroup = "" }},
		{"mic.pending_publish_max_age", func(c *config.Config) { c.Mic.PendingPublishMaxAge = -1 }},
		{"mic.compensation_batch_size", func(c *config.Config) { c.Mic.CompensationBatchSize = -1 }},
		{"mic.day_room_retention", func(c *config.Config) { c.Mic.DayRoomRetention = config.Duration(time.Hour) }},
		{"mic.day_totals_retention", func(c *config.Config) { c.Mic.DayTotalsRetention = config.Duration(24 * time.Hour) }},
		{"kafka.topics.mic_daily_totals", func(c *config.Config) { c.Kafka.Topics.MicDailyTotals = "" }},
		{"kafka.topics.mic_state_changelog", func(c *config.Config) { c.Kafka.Topics.MicStateChangelog = "" }},
		{"kafka.topics.mic_ledger", func(c *config.Config) { c.Kafka.Topics.MicLedger = "" }},
		{"kafka.brokers", func(c *config.Config) { c.Kafka.Brokers = nil }},
	} {
		cfg := config.Default()
		tc.mut(&cfg)
		_, err := micproc.ConfigFrom(&cfg, streams.Config{}, "")
		cfgerrtest.NamesKey(t, tc.key, err)
	}
}
