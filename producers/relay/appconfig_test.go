package relay_test

import (
	"strings"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/cfgerr/cfgerrtest"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/producers/relay"
)

// The defaults pass relay.ConfigFrom, map every relay.* key, and equal
// the relay's own defaults, so a library user and `roomflow relay` agree.
func TestRelayWiringDefaults(t *testing.T) {
	cfg := config.Default()
	cfg.Relay.Routes = map[string]string{"RoomGiftSent": cfg.Kafka.Topics.LuckyPoolInflow}
	c, err := relay.ConfigFrom(&cfg, relay.Config{InstanceID: "pod-0-relay"})
	if err != nil {
		t.Fatalf("defaults must pass relay.ConfigFrom: %v", err)
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
		Mode:            relay.DefaultMode,
		Binlog:          relay.BinlogConfig{DSN: cfg.MySQL.DSN, HeartbeatPeriod: relay.DefaultHeartbeatPeriod},
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
		t.Error("no registerer must give no registerer (not a nil *Registry in an interface)")
	}
}

// equalRelayConfig compares the comparable settings of two configs.
func equalRelayConfig(a, b relay.Config) bool {
	return a.BatchSize == b.BatchSize && a.PollInterval == b.PollInterval && a.GapMaxAge == b.GapMaxAge &&
		a.MaxOpenGaps == b.MaxOpenGaps && a.FailoverTimeout == b.FailoverTimeout && a.TransactionalID == b.TransactionalID &&
		a.MaxRecordBytes == b.MaxRecordBytes && a.MaxBatchBytes == b.MaxBatchBytes && a.Topic == b.Topic &&
		a.DLQTopic == b.DLQTopic && a.OffsetsTopic == b.OffsetsTopic && a.ShutdownTimeout == b.ShutdownTimeout &&
		a.InstanceID == b.InstanceID && a.Table == b.Table && a.Mode == b.Mode && a.Binlog == b.Binlog
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
		{"relay.mode", func(c *config.Config) { c.Relay.Mode = "cdc" }},
		{"relay.binlog.server_id", func(c *config.Config) { c.Relay.Mode = "binlog" }},
		{"relay.binlog.heartbeat_period", func(c *config.Config) {
			c.Relay.Mode, c.Relay.Binlog.ServerID, c.Relay.Binlog.HeartbeatPeriod = "binlog", 7, -1
		}},
		{"mysql.dsn", func(c *config.Config) {
			c.Relay.Mode, c.Relay.Binlog.ServerID, c.MySQL.DSN = "binlog", 7, "root:secret@tcp(h:3306/x"
		}},
		{"relay.binlog.dsn", func(c *config.Config) {
			c.Relay.Mode, c.Relay.Binlog.ServerID, c.Relay.Binlog.DSN = "binlog", 7, "repl:secret@tcp(h:3306/"
		}},
	}
	for _, tc := range cases {
		c := config.Default()
		tc.mut(&c)
		_, err := relay.ConfigFrom(&c, relay.Config{})
		cfgerrtest.NamesKey(t, tc.key, err)
	}
}
