package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/app"
	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/producers/relay"
)

// The defaults pass the relay's wiring, map every relay.* key, and equal
// the relay's own defaults, so a library user and `roomflow relay` agree.
func TestRelayWiringDefaults(t *testing.T) {
	cfg := config.Default()
	cfg.Relay.Routes = map[string]string{"RoomGiftSent": cfg.Kafka.Topics.LuckyPoolInflow}
	c, err := relayConfig(&app.Deps{Config: &cfg}, "pod-0-relay")
	if err != nil {
		t.Fatalf("defaults must pass the relay's wiring: %v", err)
	}
	want := relay.Config{
		BatchSize:       relay.DefaultBatchSize,
		PollInterval:    relay.DefaultPollInterval,
		GapMaxAge:       relay.DefaultGapMaxAge,
		MaxOpenGaps:     relay.DefaultMaxOpenGaps,
		FailoverTimeout: relay.DefaultFailoverTimeout,
		TransactionalID: "roomflow-relay",
		MaxRecordBytes:  relay.DefaultMaxRecordBytes,
		MaxBatchBytes:   relay.DefaultMaxBatchBytes,
		Topic:           "hyapp.room.events.v1",
		DLQTopic:        "hyapp.room.events.dlq.v1",
		OffsetsTopic:    "roomflow.relay.offsets.v1",
		ShutdownTimeout: relay.DefaultShutdownTimeout,
		InstanceID:      "pod-0-relay",
	}
	if !equalRelayConfig(c, want) { // routes and kafka below
		t.Errorf("mapped\n%+v\nwant\n%+v", c, want)
	}
	if c.Routes["RoomGiftSent"] != cfg.Kafka.Topics.LuckyPoolInflow || len(c.Routes) != 1 {
		t.Errorf("routes %v", c.Routes)
	}
	if strings.Join(c.Kafka.Brokers, ",") != strings.Join(cfg.Kafka.Brokers, ",") || c.Kafka.ClientID != cfg.Kafka.ClientID ||
		c.Kafka.SessionTimeout != cfg.Kafka.SessionTimeout.D() {
		t.Errorf("kafka %+v from %+v", c.Kafka, cfg.Kafka)
	}
	if c.Registerer != nil || c.Kafka.Metrics != nil {
		t.Error("a Deps without a registry must give no registerer (not a nil *Registry in an interface)")
	}
}

// equalRelayConfig compares the comparable settings of two configs.
func equalRelayConfig(a, b relay.Config) bool {
	return a.BatchSize == b.BatchSize && a.PollInterval == b.PollInterval && a.GapMaxAge == b.GapMaxAge &&
		a.MaxOpenGaps == b.MaxOpenGaps && a.FailoverTimeout == b.FailoverTimeout && a.TransactionalID == b.TransactionalID &&
		a.MaxRecordBytes == b.MaxRecordBytes && a.MaxBatchBytes == b.MaxBatchBytes && a.Topic == b.Topic &&
		a.DLQTopic == b.DLQTopic && a.OffsetsTopic == b.OffsetsTopic && a.ShutdownTimeout == b.ShutdownTimeout &&
		a.InstanceID == b.InstanceID && a.Table == b.Table
}

// Every relay check, each with the app's dotted key its error must name
// (the relay.* cases of internal/config's Validate before the relay owned
// them, the max_open_gaps limit relay.New checked, route topic names).
func TestRelayWiringNamesTheKey(t *testing.T) {
	cases := []struct {
		key string
		mut func(*config.Config)
	}{
		{"relay.batch_size", func(c *config.Config) { c.Relay.BatchSize = -1 }},
		{"relay.poll_interval", func(c *config.Config) { c.Relay.PollInterval = -1 }},
		{"relay.gap_max_age", func(c *config.Config) { c.Relay.GapMaxAge = -1 }},
		{"relay.max_open_gaps", func(c *config.Config) { c.Relay.MaxOpenGaps = -1 }},
		{"relay.max_open_gaps", func(c *config.Config) { c.Relay.MaxOpenGaps = 1_000_000 }},
		{"relay.failover_timeout", func(c *config.Config) { c.Relay.FailoverTimeout = -1 }},
		{"relay.failover_timeout", func(c *config.Config) { c.Relay.FailoverTimeout = config.Duration(100 * time.Millisecond) }},
		{"relay.transactional_id", func(c *config.Config) { c.Relay.TransactionalID = "" }},
		{"relay.max_record_bytes", func(c *config.Config) { c.Relay.MaxRecordBytes = -1 }},
		{"relay.max_batch_bytes", func(c *config.Config) { c.Relay.MaxBatchBytes = -1 }},
		{"relay.routes", func(c *config.Config) { c.Relay.Routes = map[string]string{"": "x"} }},
		{"relay.routes.RoomGiftSent", func(c *config.Config) { c.Relay.Routes = map[string]string{"RoomGiftSent": "no spaces"} }},
		{"relay.routes.RoomGiftSent", func(c *config.Config) {
			c.Relay.Routes = map[string]string{"RoomGiftSent": c.Kafka.Topics.RelayOffsets}
		}},
		{"kafka.topics.room_events", func(c *config.Config) { c.Kafka.Topics.RoomEvents = "" }},
		{"kafka.topics.dlq", func(c *config.Config) { c.Kafka.Topics.DLQ = "bad topic!" }},
		{"kafka.topics.relay_offsets", func(c *config.Config) { c.Kafka.Topics.RelayOffsets = "" }},
		{"shutdown.timeout", func(c *config.Config) { c.Shutdown.Timeout = -1 }},
		{"kafka.brokers", func(c *config.Config) { c.Kafka.Brokers = nil }},
	}
	for _, tc := range cases {
		c := config.Default()
		tc.mut(&c)
		_, err := relayConfig(&app.Deps{Config: &c}, "")
		if err == nil {
			t.Errorf("%s: invalid value accepted", tc.key)
			continue
		}
		if !hasFieldKey(err, tc.key) {
			t.Errorf("%s: error does not name the key: %v", tc.key, err)
		}
		if !strings.Contains(err.Error(), "config: "+tc.key+": ") {
			t.Errorf("%s: message %q does not start with the key", tc.key, err)
		}
	}
}

// Every command refuses a relay.* value the relay would refuse at start.
func TestRelayWiringAtLoad(t *testing.T) {
	_, err := runCLI(t, "relay:\n  max_open_gaps: 1000000\n", "config")
	if err == nil || !strings.Contains(err.Error(), "relay.max_open_gaps") {
		t.Fatalf("a relay.max_open_gaps above the limit must fail at load naming the key: %v", err)
	}
}

// hasFieldKey reports whether err (or one it joins) is a
// *cfgerr.FieldError keyed key.
func hasFieldKey(err error, key string) bool {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if hasFieldKey(e, key) {
				return true
			}
		}
		return false
	}
	var fe *cfgerr.FieldError
	return errors.As(err, &fe) && fe.Key == key
}
