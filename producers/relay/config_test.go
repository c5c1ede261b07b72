package relay

import (
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/kafkax"
)

// minimalConfig sets only what has no default.
func minimalConfig() Config {
	return Config{TransactionalID: "roomflow-relay", Topic: "events", DLQTopic: "dlq", OffsetsTopic: "offsets",
		Kafka: kafkax.Cluster{Brokers: []string{"127.0.0.1:1"}}}
}

// New fills every field whose zero is not a setting, and keeps what was set.
func TestNewFillsDefaults(t *testing.T) {
	r, err := New(minimalConfig(), nilDB(t))
	if err != nil {
		t.Fatal(err)
	}
	c := r.cfg
	if c.BatchSize != DefaultBatchSize || c.PollInterval != DefaultPollInterval || c.GapMaxAge != DefaultGapMaxAge ||
		c.MaxOpenGaps != DefaultMaxOpenGaps || c.FailoverTimeout != DefaultFailoverTimeout ||
		c.MaxRecordBytes != DefaultMaxRecordBytes || c.MaxBatchBytes != DefaultMaxBatchBytes ||
		c.ShutdownTimeout != DefaultShutdownTimeout || c.Table != DefaultTable || c.Logger != slog.Default() || c.Now == nil {
		t.Fatalf("defaults not filled: %+v", c)
	}
	set := minimalConfig()
	set.BatchSize, set.PollInterval, set.Table = 7, time.Second, "other_outbox"
	if r, err = New(set, nilDB(t)); err != nil {
		t.Fatal(err)
	}
	if r.cfg.BatchSize != 7 || r.cfg.PollInterval != time.Second || r.cfg.Table != "other_outbox" {
		t.Fatalf("set values not kept: %+v", r.cfg)
	}
}

// Every check of Validate, each with the key its error must name. Validate
// applies no defaults, so a zero count or duration is refused.
func TestValidateNamesTheField(t *testing.T) {
	valid := minimalConfig()
	valid.setDefaults()
	if err := valid.Validate(); err != nil {
		t.Fatalf("defaults must validate: %v", err)
	}
	bounds := valid
	bounds.FailoverTimeout, bounds.MaxRecordBytes = FailoverTimeoutLimit, MaxRecordBytesLimit
	if err := bounds.Validate(); err != nil {
		t.Fatalf("the upper bounds themselves must validate: %v", err)
	}
	cases := []struct {
		key string
		mut func(*Config)
	}{
		{"batch_size", func(c *Config) { c.BatchSize = -1 }},
		{"poll_interval", func(c *Config) { c.PollInterval = -1 }},
		{"gap_max_age", func(c *Config) { c.GapMaxAge = -1 }},
		{"max_open_gaps", func(c *Config) { c.MaxOpenGaps = -1 }},
		{"max_open_gaps", func(c *Config) { c.MaxOpenGaps = 1_000_000 }},
		{"failover_timeout", func(c *Config) { c.FailoverTimeout = -1 }},
		{"failover_timeout", func(c *Config) { c.FailoverTimeout = 100 * time.Millisecond }},
		{"failover_timeout", func(c *Config) { c.FailoverTimeout = FailoverTimeoutLimit + time.Millisecond }},
		{"transactional_id", func(c *Config) { c.TransactionalID = "" }},
		{"max_record_bytes", func(c *Config) { c.MaxRecordBytes = -1 }},
		{"max_record_bytes", func(c *Config) { c.MaxRecordBytes = MaxRecordBytesLimit + 1 }},
		{"max_batch_bytes", func(c *Config) { c.MaxBatchBytes = -1 }},
		{"routes", func(c *Config) { c.Routes = map[string]string{"": "x"} }},
		{"routes.RoomGiftSent", func(c *Config) { c.Routes = map[string]string{"RoomGiftSent": "no spaces"} }},
		{"routes.RoomGiftSent", func(c *Config) { c.Routes = map[string]string{"RoomGiftSent": c.OffsetsTopic} }},
		{"topic", func(c *Config) { c.Topic = "" }},
		{"dlq_topic", func(c *Config) { c.DLQTopic = "bad topic!" }},
		{"offsets_topic", func(c *Config) { c.OffsetsTopic = "" }},
		{"offsets_topic", func(c *Config) { c.OffsetsTopic = c.Topic }},
		{"shutdown_timeout", func(c *Config) { c.ShutdownTimeout = -1 }},
		{"kafka.brokers", func(c *Config) { c.Kafka.Brokers = nil }},
		{"table", func(c *Config) { c.Table = "room_outbox; DROP TABLE x" }},
	}
	for _, tc := range cases {
		c := valid
		tc.mut(&c)
		err := c.Validate()
		if !slices.Contains(cfgerr.Keys(err), tc.key) {
			t.Errorf("%s: error does not name the key: %v", tc.key, err)
		}
		if err != nil && !strings.Contains(err.Error(), "config: "+tc.key+": ") {
			t.Errorf("%s: message %q does not start with the key", tc.key, err)
		}
	}
}

// New returns Validate's error as it is.
func TestNewReturnsFieldErrors(t *testing.T) {
	c := minimalConfig()
	c.BatchSize, c.Topic = -1, ""
	_, err := New(c, nilDB(t))
	if !slices.Contains(cfgerr.Keys(err), "batch_size") || !slices.Contains(cfgerr.Keys(err), "topic") {
		t.Fatalf("want batch_size and topic named, got %v", err)
	}
}
