package mysqlsink

import (
	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/config"
)

// ConfigFrom maps sink.*, kafka.* (the cluster, topics.dlq) and
// shutdown.timeout onto Config and validates it, errors keyed by the
// application's dotted keys. own carries what the command line and the
// process give: OwnerID (--owner-id), Parallelism (--parallelism),
// InstanceID (the static member id), Health, Registerer and Logger (the
// Kafka cluster reports to them); their errors name the flags.
func ConfigFrom(app *config.Config, own Config) (Config, error) {
	s := app.Sink
	c := Config{
		BatchSize:       s.BatchSize,
		FlushInterval:   s.FlushInterval.D(),
		Group:           s.Group,
		MaxRetries:      s.MaxRetries,
		DLQTopic:        app.Kafka.Topics.DLQ,
		ShutdownTimeout: app.Shutdown.Timeout.D(),
		Kafka:           app.Kafka.Cluster(own.Registerer, own.Logger),
		Registerer:      own.Registerer,
		Logger:          own.Logger,
		Health:          own.Health,
		OwnerID:         own.OwnerID,
		InstanceID:      own.InstanceID,
		Parallelism:     own.Parallelism,
	}
	return c, cfgerr.Under("sink", appKeys, c.Validate())
}

// appKeys are the Config fields that do not come from sink.*.
var appKeys = map[string]string{
	"dlq_topic":        "kafka.topics.dlq",
	"shutdown_timeout": "shutdown.timeout",
	"kafka.brokers":    "kafka.brokers",
	"owner_id":         "--owner-id",
	"parallelism":      "--parallelism",
}

// ApplierConfigFrom is the ApplierConfig of the fact stream on the topic
// the key topicKey ("kafka.topics.mic_ledger") names, app_code its default
// app_code, validated, errors keyed by those keys.
func ApplierConfigFrom(app *config.Config, topicKey, topic string) (ApplierConfig, error) {
	c := ApplierConfig{Topic: topic, DefaultAppCode: app.AppCode}
	return c, cfgerr.Under(topicKey, map[string]string{"topic": topicKey, "default_app_code": "app_code"}, c.Validate())
}

// StoreConfigFrom is the StoreConfig of sink.group with the appliers, one
// per fact topic, validated, errors keyed by the application's keys (two
// appliers on one topic: kafka.topics).
func StoreConfigFrom(app *config.Config, appliers ...Registration) (StoreConfig, error) {
	c := StoreConfig{Group: app.Sink.Group, Appliers: appliers}
	return c, cfgerr.Under("sink", map[string]string{"appliers": "kafka.topics"}, c.Validate())
}
