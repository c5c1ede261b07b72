package imoutbox

import (
	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/sinks/tencentim"
)

// ConfigFrom maps outbox_worker.*, im.*, kafka.* (the cluster, the room
// events topic), shutdown.timeout and app_code onto Config and validates
// it, errors keyed by the application's dotted keys
// ("outbox_worker.lock_ttl", "im.secret_key"). With
// outbox_worker.enabled=false only the outbox_worker settings the backlog
// gauges' service runs with are checked: im.* and the fast path's keys
// cannot stop a publisher that delivers nothing. own carries what no key
// gives: InstanceID (the fast path's static member id in
// outbox_worker.group; "": dynamic), Registerer and Logger (nil: no
// metrics, the default logger).
func ConfigFrom(app *config.Config, own Config) (Config, error) {
	ow, im := app.OutboxWorker, app.IM
	c := Config{
		ServiceConfig: ServiceConfig{
			NodeID:              ow.NodeID,
			GroupIDPrefix:       im.GroupIDPrefix,
			PollInterval:        ow.PollInterval.D(),
			BatchSize:           ow.BatchSize,
			PublishTimeout:      ow.PublishTimeout.D(),
			RetryStrategy:       ow.RetryStrategy,
			ClaimGrace:          ow.ClaimGrace.D(),
			LockTTL:             ow.LockTTL.D(),
			MarkPermanentFailed: im.MarkPermanentFailed,
			DrainTimeout:        app.Shutdown.Timeout.D(),
			AppCode:             app.AppCode,
			Registerer:          own.Registerer,
			Logger:              own.Logger,
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
		Topic:         app.Kafka.Topics.RoomEvents,
		Kafka:         app.Kafka.Cluster(own.Registerer, own.Logger),
		InstanceID:    own.InstanceID,
		// 0 switches the fallback off (in imoutbox 0 is the default).
		ScanFallbackAfter:   im.ScanFallbackAfter.D(),
		DisableScanFallback: im.ScanFallbackAfter == 0,
		PoolConns:           app.MySQL.MaxOpenConns,
	}
	return c, cfgerr.Under("outbox_worker", appKeys, c.Validate())
}

// appKeys are the Config fields that do not come from outbox_worker.*.
var appKeys = func() map[string]string {
	keys := map[string]string{
		"group_id_prefix":       "im.group_id_prefix",
		"mark_permanent_failed": "im.mark_permanent_failed",
		"fast_path_delay":       "im.fast_path_delay",
		"scan_fallback_after":   "im.scan_fallback_after",
		"drain_timeout":         "shutdown.timeout",
		"app_code":              "app_code",
		"topic":                 "kafka.topics.room_events",
		"kafka.brokers":         "kafka.brokers",
		"pool_conns":            "mysql.max_open_conns",
	}
	// The IM client's fields are im.* under the same names.
	for _, k := range []string{"endpoint", "sdk_app_id", "admin_identifier", "secret_key", "usersig_ttl",
		"max_calls_per_second", "max_messages_per_group_per_second", "max_message_bytes"} {
		keys["im."+k] = "im." + k
	}
	return keys
}()
