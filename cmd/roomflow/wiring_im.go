package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyapp/roomflow/internal/app"
	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/sinks/imoutbox"
	"github.com/hyapp/roomflow/sinks/tencentim"
)

// imPublisherConfig maps outbox_worker.*, im.*, kafka.* (the cluster, the
// room events topic), shutdown.timeout and app_code onto imoutbox.Config
// and validates it, keyed by the app's dotted keys
// ("outbox_worker.lock_ttl", "im.secret_key"). With
// outbox_worker.enabled=false only the outbox_worker settings the backlog
// gauges' service runs with are checked: im.* and the fast path's keys
// cannot stop a publisher that delivers nothing, and no other command
// looks at them. instanceID makes the fast path a static member of
// outbox_worker.group ("": dynamic). d.Registry and d.Log may be nil (a
// check before the process has them): no metrics, the default logger.
func imPublisherConfig(d *app.Deps, instanceID string) (imoutbox.Config, error) {
	cfg := d.Config
	var reg prometheus.Registerer
	if d.Registry != nil {
		reg = d.Registry
	}
	ow, im := cfg.OutboxWorker, cfg.IM
	c := imoutbox.Config{
		ServiceConfig: imoutbox.ServiceConfig{
			NodeID:              ow.NodeID,
			GroupIDPrefix:       im.GroupIDPrefix,
			PollInterval:        ow.PollInterval.D(),
			BatchSize:           ow.BatchSize,
			PublishTimeout:      ow.PublishTimeout.D(),
			RetryStrategy:       ow.RetryStrategy,
			ClaimGrace:          ow.ClaimGrace.D(),
			LockTTL:             ow.LockTTL.D(),
			MarkPermanentFailed: im.MarkPermanentFailed,
			DrainTimeout:        cfg.Shutdown.Timeout.D(),
			AppCode:             cfg.AppCode,
			Registerer:          reg,
			Logger:              d.Log,
		},
		DisableDelivery: !ow.Enabled,
		IM: tencentim.Config{
			Endpoint:                     im.Endpoint,
			SDKAppID:                     im.SDKAppID,
			AdminIdentifier:              im.AdminIdentifier,
			SecretKey:                    im.SecretKey,
			UserSigTTL:                   im.UserSigTTL.D(),
			MaxCallsPerSecond:            im.MaxCallsPerSecond,
			MaxMessagesPerGroupPerSecond: im.MaxMessagesPerGroupPerSecond,
			MaxMessageBytes:              im.MaxMessageBytes,
		},
		FastPathDelay: im.FastPathDelay.D(),
		Group:         ow.Group,
		Topic:         cfg.Kafka.Topics.RoomEvents,
		Kafka:         kafkax.NewCluster(cfg.Kafka, reg, d.Log),
		InstanceID:    instanceID,
	}
	return c, cfgerr.Under("outbox_worker", imPublisherKeys, c.Validate())
}

// imPublisherKeys are the imoutbox.Config fields that do not come from
// outbox_worker.*.
var imPublisherKeys = func() map[string]string {
	keys := map[string]string{
		"group_id_prefix":       "im.group_id_prefix",
		"mark_permanent_failed": "im.mark_permanent_failed",
		"fast_path_delay":       "im.fast_path_delay",
		"drain_timeout":         "shutdown.timeout",
		"app_code":              "app_code",
		"topic":                 "kafka.topics.room_events",
		"kafka.brokers":         "kafka.brokers",
	}
	// The IM client's fields are im.* under the same names.
	for _, k := range []string{"endpoint", "sdk_app_id", "admin_identifier", "secret_key", "usersig_ttl",
		"max_calls_per_second", "max_messages_per_group_per_second", "max_message_bytes"} {
		keys["im."+k] = "im." + k
	}
	return keys
}()
