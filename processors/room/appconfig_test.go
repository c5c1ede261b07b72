package room_test

import (
	"strings"
	"testing"

	"github.com/hyapp/roomflow/internal/cfgerr/cfgerrtest"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/processors/room"
	"github.com/hyapp/roomflow/processors/streams"
)

// The defaults pass; every room processor key is named when refused.
func TestConfigFrom(t *testing.T) {
	def := config.Default()
	c, err := room.ConfigFrom(&def, streams.Config{}, "pod-1")
	if err != nil || c.Runtime.Name != room.Name || c.Runtime.Input != def.Kafka.Topics.RoomEvents ||
		c.Runtime.TransactionalID != def.Process.RoomGroup+"-pod-1" || c.Runtime.InstanceID != "pod-1-room" ||
		c.MicTopic != def.Kafka.Topics.UserMicEvents || c.InflowTopic != def.Kafka.Topics.LuckyPoolInflow {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	for _, tc := range []struct {
		key string
		mut func(*config.Config)
	}{
		{"process.commit_interval", func(c *config.Config) { c.Process.CommitInterval = -1 }},
		{"process.room_group", func(c *config.Config) { c.Process.RoomGroup = "" }},
		{"kafka.topics.room_events", func(c *config.Config) { c.Kafka.Topics.RoomEvents = "" }},
		{"kafka.topics.lucky_pool_inflow", func(c *config.Config) { c.Kafka.Topics.LuckyPoolInflow = "" }},
		{"kafka.topics.dlq", func(c *config.Config) { c.Kafka.Topics.DLQ = "" }},
		{"app_code", func(c *config.Config) { c.AppCode = strings.Repeat("a", 33) }},
		// Written into envelopes and inflows as a protobuf string: marshalling
		// the inflow would fail on every lucky gift without app_code.
		{"app_code", func(c *config.Config) { c.AppCode = "hy\xffapp" }},
	} {
		cfg := config.Default()
		tc.mut(&cfg)
		_, err := room.ConfigFrom(&cfg, streams.Config{}, "")
		cfgerrtest.NamesKey(t, tc.key, err)
	}
}
