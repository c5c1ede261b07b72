package relay

import (
	"cmp"
	"maps"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/config"
)

// ConfigFrom maps the application config's relay.*, kafka.* and
// shutdown.timeout onto Config and validates it, errors keyed by the
// operator's dotted keys ("relay.batch_size"). own carries what no key
// gives: InstanceID (the replica's static member id in the leader group;
// "": dynamic), Registerer and Logger (nil: no metrics, the default
// logger); the Kafka cluster reports to them.
func ConfigFrom(app *config.Config, own Config) (Config, error) {
	r := app.Relay
	c := Config{
		BatchSize:       r.BatchSize,
		PollInterval:    r.PollInterval.D(),
		GapMaxAge:       r.GapMaxAge.D(),
		MaxOpenGaps:     r.MaxOpenGaps,
		FailoverTimeout: r.FailoverTimeout.D(),
		TransactionalID: r.TransactionalID,
		MaxRecordBytes:  r.MaxRecordBytes,
		MaxBatchBytes:   r.MaxBatchBytes,
		Routes:          maps.Clone(r.Routes),
		Topic:           app.Kafka.Topics.RoomEvents,
		DLQTopic:        app.Kafka.Topics.DLQ,
		OffsetsTopic:    app.Kafka.Topics.RelayOffsets,
		ShutdownTimeout: app.Shutdown.Timeout.D(),
		Kafka:           app.Kafka.Cluster(own.Registerer, own.Logger),
		Registerer:      own.Registerer,
		Logger:          own.Logger,
		InstanceID:      own.InstanceID,
		Mode:            Mode(r.Mode),
		Binlog: BinlogConfig{
			DSN:             cmp.Or(r.Binlog.DSN, app.MySQL.DSN),
			ServerID:        r.Binlog.ServerID,
			SnapshotFromID:  r.Binlog.SnapshotFromID,
			HeartbeatPeriod: r.Binlog.HeartbeatPeriod.D(),
		},
	}
	keys := appKeys
	if r.Binlog.DSN != "" {
		keys = maps.Clone(appKeys)
		delete(keys, "binlog.dsn") // relay.binlog.dsn itself
	}
	return c, cfgerr.Under("relay", keys, c.Validate())
}

// appKeys are the Config fields that do not come from relay.*.
var appKeys = map[string]string{
	"topic":            "kafka.topics.room_events",
	"dlq_topic":        "kafka.topics.dlq",
	"offsets_topic":    "kafka.topics.relay_offsets",
	"shutdown_timeout": "shutdown.timeout",
	"kafka.brokers":    "kafka.brokers",
	"binlog.dsn":       "mysql.dsn",
}
