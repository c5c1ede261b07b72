package rebuild

import (
	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/config"
)

// ConfigFrom maps sink.group, app_code and kafka.* (the cluster, the mic
// ledger and, with pools, the lucky pool inflow topic) onto Config and
// validates it, errors keyed by the application's keys. own carries what
// the command line gives (BatchSize --batch-size, Idle --idle: errors name
// the flags) and the Logger; the run registers no metrics.
func ConfigFrom(app *config.Config, own Config, pools bool) (Config, error) {
	c := Config{
		Group:          app.Sink.Group,
		LedgerTopic:    app.Kafka.Topics.MicLedger,
		DefaultAppCode: app.AppCode,
		BatchSize:      own.BatchSize,
		Idle:           own.Idle,
		Kafka:          app.Kafka.Cluster(nil, own.Logger),
		Logger:         own.Logger,
	}
	if pools {
		c.InflowTopic = app.Kafka.Topics.LuckyPoolInflow
	}
	return c, cfgerr.Under("rebuild", appKeys, c.Validate())
}

// appKeys map every Config field: none is a rebuild.* key.
var appKeys = map[string]string{
	"group":            "sink.group",
	"ledger_topic":     "kafka.topics.mic_ledger",
	"inflow_topic":     "kafka.topics.lucky_pool_inflow",
	"default_app_code": "app_code",
	"batch_size":       "--batch-size",
	"idle":             "--idle",
	"kafka.brokers":    "kafka.brokers",
	"binlog.dsn":       "mysql.dsn",
}
