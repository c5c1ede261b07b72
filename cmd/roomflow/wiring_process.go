package main

import (
	"fmt"
	"maps"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyapp/roomflow/internal/app"
	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/processors/lucky"
	"github.com/hyapp/roomflow/processors/mic"
	"github.com/hyapp/roomflow/processors/mic/micproc"
	"github.com/hyapp/roomflow/processors/room"
	"github.com/hyapp/roomflow/processors/runtime"
)

// processSelection is the processors `roomflow process` runs: "" (both),
// "room" or "mic", from --only or else process.only.
func processSelection(d *app.Deps) (string, error) {
	if only := d.Flag("only"); only != "" {
		if only != "room" && only != "mic" {
			return "", fmt.Errorf("--only: must be room or mic (got %q)", only)
		}
		return only, nil
	}
	switch only := d.Config.Process.Only; only {
	case "", "room", "mic":
		return only, nil
	default:
		return "", &cfgerr.FieldError{Key: "process.only", Msg: fmt.Sprintf("must be empty, room or mic (got %q)", only)}
	}
}

// processRuntime is the runtime every roomflow processor runs on, the
// shared half of roomConfig and micConfig: the processor name (the
// processor label of its metrics; its Kafka clients are
// "<name>-processor"), its input topic and consumer group, the DLQ
// kafka.topics.dlq, a transaction every process.commit_interval or
// process.commit_records records, the kafka.* cluster (its group session
// kafka.session_timeout, its clients' roomflow_kafka_* metrics on the
// registry and franz-go logs on the logger), shutdown.timeout for the
// final commit, the runtime's metrics and logs. With --instance-id the
// instance's transactional id is "<group>-<instance id>" and it is a
// static member "<instance id>-<name>" (memberID); without, the runtime's
// defaults ("<group>-<hostname>", a dynamic member).
func processRuntime(d *app.Deps, name, group, input string) runtime.Config {
	cfg := d.Config
	var reg prometheus.Registerer // a nil *Registry must stay a nil interface
	if d.Registry != nil {
		reg = d.Registry
	}
	c := runtime.Config{
		Name:            name,
		Input:           input,
		Group:           group,
		DLQ:             cfg.Kafka.Topics.DLQ,
		CommitInterval:  cfg.Process.CommitInterval.D(),
		CommitRecords:   cfg.Process.CommitRecords,
		ShutdownTimeout: cfg.Shutdown.Timeout.D(),
		Kafka:           kafkax.NewCluster(cfg.Kafka, reg, d.Log),
		Registerer:      reg,
		Logger:          d.Log,
	}
	if id := d.Flag("instance-id"); id != "" {
		c.TransactionalID = group + "-" + id
		c.InstanceID = memberID(d, name)
	}
	return c
}

// processKeys is the key table of a processor's Config: own (its own
// fields) plus its runtime.Config's keys (under "runtime.") mapped onto
// the application's; input and group are the keys of the processor's
// input topic and consumer group.
func processKeys(input, group string, own map[string]string) map[string]string {
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

// roomConfig maps the room processor's keys onto room.Config and validates
// it, keyed by the application's dotted keys: the runtime of
// processRuntime on kafka.topics.room_events in process.room_group, the
// outputs kafka.topics.user_mic_events and lucky_pool_inflow, app_code.
func roomConfig(d *app.Deps) (room.Config, error) {
	cfg := d.Config
	t := cfg.Kafka.Topics
	c := room.Config{
		Runtime:     processRuntime(d, room.Name, cfg.Process.RoomGroup, t.RoomEvents),
		MicTopic:    t.UserMicEvents,
		InflowTopic: t.LuckyPoolInflow,
		AppCode:     cfg.AppCode,
	}
	return c, cfgerr.Under("process.room", roomKeys, c.Validate())
}

var roomKeys = processKeys("kafka.topics.room_events", "process.room_group", map[string]string{
	"mic_topic":    "kafka.topics.user_mic_events",
	"inflow_topic": "kafka.topics.lucky_pool_inflow",
	"app_code":     "app_code",
})

// ruleLoaderConfig maps process.rule_cache_size onto the room processor's
// rule loader (lucky.LoaderConfig) and validates it.
func ruleLoaderConfig(d *app.Deps) (lucky.LoaderConfig, error) {
	c := lucky.LoaderConfig{CacheSize: d.Config.Process.RuleCacheSize}
	return c, cfgerr.Under("process.rules", ruleLoaderKeys, c.Validate())
}

var ruleLoaderKeys = map[string]string{"cache_size": "process.rule_cache_size"}

// micConfig maps the mic processor's keys onto micproc.Config and
// validates it, keyed by the application's dotted keys: the runtime of
// processRuntime on kafka.topics.user_mic_events in process.mic_group
// with the changelog kafka.topics.mic_state_changelog, the output topics
// kafka.topics.mic_*, the mic.* settings, app_code.
func micConfig(d *app.Deps) (micproc.Config, error) {
	cfg := d.Config
	t := cfg.Kafka.Topics
	m := cfg.Mic
	c := micproc.Config{
		Runtime: processRuntime(d, micproc.Name, cfg.Process.MicGroup, t.UserMicEvents),
		Topics: micproc.Topics{
			Ledger:        t.MicLedger,
			SessionClosed: t.MicSessionClosed,
			DailyStats:    t.MicDailyStats,
			LifetimeStats: t.MicLifetimeStats,
		},
		Settings: micproc.Settings{
			Policy: mic.Policy{
				PendingPublishMaxAge:    m.PendingPublishMaxAge.D(),
				PublishingSessionMaxAge: m.PublishingSessionMaxAge.D(),
			},
			DisableCompensation:    !m.CompensationEnabled,
			CompensationInterval:   m.CompensationInterval.D(),
			CompensationBatchSize:  m.CompensationBatchSize,
			ClosedSessionRetention: m.ClosedSessionRetention.D(),
			DayRoomRetention:       m.DayRoomRetention.D(),
		},
		AppCode: cfg.AppCode,
	}
	c.Runtime.Changelog = t.MicStateChangelog
	return c, cfgerr.Under("process.mic", micKeys, c.Validate())
}

var micKeys = processKeys("kafka.topics.user_mic_events", "process.mic_group", map[string]string{
	"runtime.changelog":                          "kafka.topics.mic_state_changelog",
	"topics.ledger":                              "kafka.topics.mic_ledger",
	"topics.session_closed":                      "kafka.topics.mic_session_closed",
	"topics.daily_stats":                         "kafka.topics.mic_daily_stats",
	"topics.lifetime_stats":                      "kafka.topics.mic_lifetime_stats",
	"settings.policy.pending_publish_max_age":    "mic.pending_publish_max_age",
	"settings.policy.publishing_session_max_age": "mic.publishing_session_max_age",
	"settings.compensation_interval":             "mic.compensation_interval",
	"settings.compensation_batch_size":           "mic.compensation_batch_size",
	"settings.closed_session_retention":          "mic.closed_session_retention",
	"settings.day_room_retention":                "mic.day_room_retention",
	"app_code":                                   "app_code",
})
