package main

import (
	"maps"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyapp/roomflow/internal/app"
	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/producers/relay"
)

// relayConfig maps relay.*, kafka.* and shutdown.timeout onto relay.Config
// and validates it, keyed by the app's dotted keys ("relay.batch_size").
// instanceID makes the replica a static member of the leader group ("":
// dynamic). d.Registry and d.Log may be nil (a check at load, before the
// process has them): no metrics, the default logger.
func relayConfig(d *app.Deps, instanceID string) (relay.Config, error) {
	cfg := d.Config
	var reg prometheus.Registerer
	if d.Registry != nil {
		reg = d.Registry
	}
	c := relay.Config{
		BatchSize:       cfg.Relay.BatchSize,
		PollInterval:    cfg.Relay.PollInterval.D(),
		GapMaxAge:       cfg.Relay.GapMaxAge.D(),
		MaxOpenGaps:     cfg.Relay.MaxOpenGaps,
		FailoverTimeout: cfg.Relay.FailoverTimeout.D(),
		TransactionalID: cfg.Relay.TransactionalID,
		MaxRecordBytes:  cfg.Relay.MaxRecordBytes,
		MaxBatchBytes:   cfg.Relay.MaxBatchBytes,
		Routes:          maps.Clone(cfg.Relay.Routes),
		Topic:           cfg.Kafka.Topics.RoomEvents,
		DLQTopic:        cfg.Kafka.Topics.DLQ,
		OffsetsTopic:    cfg.Kafka.Topics.RelayOffsets,
		ShutdownTimeout: cfg.Shutdown.Timeout.D(),
		Kafka:           kafkax.NewCluster(cfg.Kafka, reg, d.Log),
		Registerer:      reg,
		Logger:          d.Log,
		InstanceID:      instanceID,
	}
	return c, cfgerr.Under("relay", relayKeys, c.Validate())
}

// relayKeys are the relay.Config fields that do not come from relay.*.
var relayKeys = map[string]string{
	"topic":            "kafka.topics.room_events",
	"dlq_topic":        "kafka.topics.dlq",
	"offsets_topic":    "kafka.topics.relay_offsets",
	"shutdown_timeout": "shutdown.timeout",
	"kafka.brokers":    "kafka.brokers",
}
