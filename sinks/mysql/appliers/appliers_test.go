package appliers_test

import (
	"strings"
	"testing"

	"github.com/hyapp/roomflow/internal/cfgerr/cfgerrtest"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/sinks/mysql/appliers"
)

// The defaults give one applier per fact topic; a bad topic or app_code
// is named, and two fact streams on one topic name kafka.topics.
func TestStoreConfigFrom(t *testing.T) {
	def := config.Default()
	c, err := appliers.StoreConfigFrom(&def)
	if err != nil || len(c.Appliers) != 3 || c.Group != def.Sink.Group {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	for _, tc := range []struct {
		key string
		mut func(*config.Config)
	}{
		{"app_code", func(c *config.Config) { c.AppCode = strings.Repeat("a", 33) }},
		{"kafka.topics", func(c *config.Config) { c.Kafka.Topics.LuckyPoolInflow = c.Kafka.Topics.MicLedger }},
		{"kafka.topics.lucky_events", func(c *config.Config) { c.Kafka.Topics.LuckyEvents = "bad topic!" }},
		{"kafka.topics", func(c *config.Config) { c.Kafka.Topics.LuckyEvents = c.Kafka.Topics.LuckyPoolInflow }},
	} {
		cfg := config.Default()
		tc.mut(&cfg)
		_, err := appliers.StoreConfigFrom(&cfg)
		cfgerrtest.NamesKey(t, tc.key, err)
	}
}
