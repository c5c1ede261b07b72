package streams

import (
	"maps"

	"github.com/hyapp/roomflow/internal/config"
)

// ConfigFrom is the runtime a roomflow processor runs on: own names the
// processor (Name, the processor label of its metrics; its Kafka clients
// are "<name>-processor"), its Input topic and consumer Group, and where
// its metrics and logs go (Registerer, Logger); the application config
// gives the DLQ kafka.topics.dlq, a transaction every
// process.commit_interval or process.commit_records records, the kafka.*
// cluster (its group session kafka.session_timeout), shutdown.timeout for
// the final commit. With an instanceID (--instance-id) the transactional
// id is "<group>-<instance id>" and the runtime a static member
// "<instance id>-<name>"; without, the runtime's defaults
// ("<group>-<hostname>", a dynamic member). The processor validates the
// result within its own Config (AppKeys names the keys).
func ConfigFrom(app *config.Config, own Config, instanceID string) Config {
	c := Config{
		Name:            own.Name,
		Input:           own.Input,
		Group:           own.Group,
		DLQ:             app.Kafka.Topics.DLQ,
		CommitInterval:  app.Process.CommitInterval.D(),
		CommitRecords:   app.Process.CommitRecords,
		ShutdownTimeout: app.Shutdown.Timeout.D(),
		Kafka:           app.Kafka.Cluster(own.Registerer, own.Logger),
		Registerer:      own.Registerer,
		Logger:          own.Logger,
	}
	if instanceID != "" {
		c.TransactionalID = own.Group + "-" + instanceID
		c.InstanceID = instanceID + "-" + own.Name
	}
	return c
}

// AppKeys is the key table of a processor's Config whose runtime field is
// "runtime": own (its own fields) plus the runtime's keys mapped onto the
// application's; input and group are the keys of the processor's input
// topic and consumer group.
func AppKeys(input, group string, own map[string]string) map[string]string {
	keys := map[string]string{
		"runtime.input":                 input,
		"runtime.group":                 group,
		"runtime.dlq":                   "kafka.topics.dlq",
		"runtime.commit_interval":       "process.commit_interval",
		"runtime.commit_records":        "process.commit_records",
		"runtime.shutdown_timeout":      "shutdown.timeout",
		"runtime.kafka.brokers":         "kafka.brokers",
		"runtime.kafka.session_timeout": "kafka.session_timeout",
	}
	maps.Copy(keys, own)
	return keys
}
