package imoutbox_test

import (
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/cfgerr/cfgerrtest"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/sinks/imoutbox"
	"github.com/hyapp/roomflow/sinks/tencentim"
)

// imTestSecret is the IM secret key of these tests: no error may hold it.
const imTestSecret = "wiring-test-secret-key"

// imWiringConfig is config.Default() with the IM credentials publish-im
// needs to deliver (the defaults have none).
func imWiringConfig() config.Config {
	cfg := config.Default()
	cfg.IM.SDKAppID, cfg.IM.SecretKey = 1400000000, imTestSecret
	return cfg
}

// The defaults with credentials pass imoutbox.ConfigFrom and map every
// outbox_worker.* and im.* key.
func TestIMWiringDefaults(t *testing.T) {
	cfg := imWiringConfig()
	// room-service publishes itself; the fast path waits for it.
	if cfg.IM.FastPathDelay.D() != 3*time.Second || cfg.OutboxWorker.ClaimGrace < cfg.IM.FastPathDelay {
		t.Fatalf("im.fast_path_delay %s, outbox_worker.claim_grace %s", cfg.IM.FastPathDelay, cfg.OutboxWorker.ClaimGrace)
	}
	cfg.OutboxWorker.NodeID, cfg.IM.GroupIDPrefix, cfg.IM.MarkPermanentFailed = "node-1", "room-", true
	c, err := imoutbox.ConfigFrom(&cfg, imoutbox.Config{InstanceID: "pod-0-publish-im"})
	if err != nil {
		t.Fatalf("defaults must pass imoutbox.ConfigFrom: %v", err)
	}
	want := imoutbox.ServiceConfig{
		NodeID: "node-1", GroupIDPrefix: "room-", PollInterval: time.Second, BatchSize: 100, PublishTimeout: 3 * time.Second,
		RetryStrategy: "fixed_interval", ClaimGrace: 5 * time.Second, LockTTL: 30 * time.Second, MarkPermanentFailed: true,
		DrainTimeout: 10 * time.Second, AppCode: "hyapp",
	}
	if c.ServiceConfig != want {
		t.Errorf("service config\n%+v\nwant\n%+v", c.ServiceConfig, want)
	}
	wantIM := tencentim.Config{Endpoint: "https://adminapisgp.im.qcloud.com", SDKAppID: 1400000000, AdminIdentifier: "administrator",
		SecretKey: imTestSecret, UserSigTTL: 24 * time.Hour, MaxCallsPerSecond: 200, MaxMessagesPerGroupPerSecond: 40, MaxMessageBytes: 12 << 10}
	if c.IM.Endpoint != wantIM.Endpoint || c.IM.SDKAppID != wantIM.SDKAppID || c.IM.AdminIdentifier != wantIM.AdminIdentifier ||
		c.IM.SecretKey != wantIM.SecretKey || c.IM.UserSigTTL != wantIM.UserSigTTL || c.IM.MaxCallsPerSecond != wantIM.MaxCallsPerSecond ||
		c.IM.MaxMessagesPerGroupPerSecond != wantIM.MaxMessagesPerGroupPerSecond || c.IM.MaxMessageBytes != wantIM.MaxMessageBytes {
		t.Errorf("im config %+v, want %+v", c.IM, wantIM)
	}
	if c.DisableDelivery || c.FastPathDelay != 3*time.Second || c.Group != "roomflow-im-publisher" ||
		c.Topic != "hyapp.room.events.v1" || c.InstanceID != "pod-0-publish-im" {
		t.Errorf("publisher config: disabled %v, delay %s, group %q, topic %q, instance %q", c.DisableDelivery, c.FastPathDelay, c.Group, c.Topic, c.InstanceID)
	}
	if c.ScanFallbackAfter != time.Minute || c.DisableScanFallback {
		t.Errorf("scan fallback after %s, disabled %v; want 1m, on", c.ScanFallbackAfter, c.DisableScanFallback)
	}
	off := cfg
	off.IM.ScanFallbackAfter = 0
	if c, err := imoutbox.ConfigFrom(&off, imoutbox.Config{}); err != nil || !c.DisableScanFallback {
		t.Errorf("im.scan_fallback_after 0: disabled %v, err %v; want off", c.DisableScanFallback, err)
	}
	if strings.Join(c.Kafka.Brokers, ",") != strings.Join(cfg.Kafka.Brokers, ",") || c.Kafka.ClientID != cfg.Kafka.ClientID ||
		c.Kafka.SessionTimeout != cfg.Kafka.SessionTimeout.D() {
		t.Errorf("kafka %+v from %+v", c.Kafka, cfg.Kafka)
	}
	if c.Registerer != nil || c.Kafka.Metrics != nil {
		t.Error("no registerer must give no registerer (not a nil *Registry in an interface)")
	}
	reg, log := prometheus.NewRegistry(), slog.New(slog.DiscardHandler)
	if c, err := imoutbox.ConfigFrom(&cfg, imoutbox.Config{ServiceConfig: imoutbox.ServiceConfig{Registerer: reg, Logger: log}}); err != nil ||
		c.Registerer != reg || c.Kafka.Metrics == nil || c.Logger != log || c.Kafka.Logger != log {
		t.Errorf("with the process's deps: %v, registerer %v, kafka metrics %v", err, c.Registerer, c.Kafka.Metrics)
	}
}

// The components' own defaults equal config.Default()'s values for the
// keys they map from, so a library user gets what `roomflow publish-im`
// runs.
func TestIMWiringComponentDefaultsMatchConfig(t *testing.T) {
	def := config.Default()
	for _, tc := range []struct {
		key       string
		got, want any
	}{
		{"outbox_worker.poll_interval", imoutbox.DefaultPollInterval, def.OutboxWorker.PollInterval.D()},
		{"outbox_worker.batch_size", imoutbox.DefaultBatchSize, def.OutboxWorker.BatchSize},
		{"outbox_worker.publish_timeout", imoutbox.DefaultPublishTimeout, def.OutboxWorker.PublishTimeout.D()},
		{"outbox_worker.claim_grace", imoutbox.DefaultClaimGrace, def.OutboxWorker.ClaimGrace.D()},
		{"outbox_worker.lock_ttl", imoutbox.DefaultLockTTL, def.OutboxWorker.LockTTL.D()},
		{"shutdown.timeout", imoutbox.DefaultDrainTimeout, def.Shutdown.Timeout.D()},
		{"im.endpoint", tencentim.DefaultEndpoint, def.IM.Endpoint},
		{"im.admin_identifier", tencentim.DefaultAdminIdentifier, def.IM.AdminIdentifier},
		{"im.usersig_ttl", tencentim.DefaultUserSigTTL, def.IM.UserSigTTL.D()},
		{"im.max_calls_per_second", tencentim.DefaultMaxCallsPerSecond, def.IM.MaxCallsPerSecond},
		{"im.max_messages_per_group_per_second", tencentim.DefaultMaxMessagesPerGroupPerSecond, def.IM.MaxMessagesPerGroupPerSecond},
		{"im.max_message_bytes", tencentim.DefaultMaxMessageBytes, def.IM.MaxMessageBytes},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: component default %v, config.Default() %v", tc.key, tc.got, tc.want)
		}
	}
}

// Every outbox_worker.* and im.* check, each with the app's dotted key its
// error must name.
func TestIMWiringNamesTheKey(t *testing.T) {
	cases := []struct {
		key string
		mut func(*config.Config)
	}{
		{"outbox_worker.retry_strategy", func(c *config.Config) { c.OutboxWorker.RetryStrategy = "exponential" }},
		{"outbox_worker.claim_grace", func(c *config.Config) { c.OutboxWorker.ClaimGrace = -1 }},
		{"outbox_worker.claim_grace", func(c *config.Config) { c.OutboxWorker.ClaimGrace = config.Duration(time.Second) }},
		{"outbox_worker.lock_ttl", func(c *config.Config) { c.OutboxWorker.LockTTL = -1 }},
		{"outbox_worker.lock_ttl", func(c *config.Config) { c.OutboxWorker.LockTTL = c.OutboxWorker.PublishTimeout }},
		{"outbox_worker.group", func(c *config.Config) { c.OutboxWorker.Group = "" }},
		{"im.endpoint", func(c *config.Config) { c.IM.Endpoint = "ftp://x" }},
		{"im.endpoint", func(c *config.Config) { c.IM.Endpoint = "http://" }},
		{"im.sdk_app_id", func(c *config.Config) { c.IM.SDKAppID = -1 }},
		{"im.sdk_app_id", func(c *config.Config) { c.IM.SDKAppID = 1 << 33 }},
		{"im.sdk_app_id", func(c *config.Config) { c.IM.SDKAppID = -1 }},
		{"im.secret_key", func(c *config.Config) { c.IM.SecretKey = "" }},
		{"im.usersig_ttl", func(c *config.Config) { c.IM.UserSigTTL = -1 }},
		{"im.usersig_ttl", func(c *config.Config) { c.IM.UserSigTTL = config.Duration(time.Minute) }},
		{"im.max_calls_per_second", func(c *config.Config) { c.IM.MaxCallsPerSecond = -1 }},
		{"im.max_messages_per_group_per_second", func(c *config.Config) { c.IM.MaxMessagesPerGroupPerSecond = -1 }},
		{"im.max_message_bytes", func(c *config.Config) { c.IM.MaxMessageBytes = -1 }},
		{"im.max_message_bytes", func(c *config.Config) { c.IM.MaxMessageBytes = tencentim.MaxMessageBytesLimit + 1 }},
		{"im.group_id_prefix", func(c *config.Config) { c.IM.GroupIDPrefix = strings.Repeat("p", tencentim.MaxGroupIDBytes) }},
		{"im.group_id_prefix", func(c *config.Config) { c.IM.GroupIDPrefix = "房间-" }},
		{"im.fast_path_delay", func(c *config.Config) { c.IM.FastPathDelay = -1 }},
		{"im.fast_path_delay", func(c *config.Config) { c.IM.FastPathDelay = config.Duration(time.Hour) }},
		{"im.scan_fallback_after", func(c *config.Config) { c.IM.ScanFallbackAfter = -1 }},
		{"im.scan_fallback_after", func(c *config.Config) { c.IM.ScanFallbackAfter = c.Kafka.SessionTimeout - 1 }},
		{"mysql.max_open_conns", func(c *config.Config) { c.MySQL.MaxOpenConns = 1 }}, // the scan fallback's lock holds it
		{"shutdown.timeout", func(c *config.Config) { c.Shutdown.Timeout = -1 }},
		{"kafka.topics.room_events", func(c *config.Config) { c.Kafka.Topics.RoomEvents = "" }},
		{"kafka.brokers", func(c *config.Config) { c.Kafka.Brokers = nil }},
	}
	for _, tc := range cases {
		cfg := imWiringConfig()
		tc.mut(&cfg)
		_, err := imoutbox.ConfigFrom(&cfg, imoutbox.Config{})
		cfgerrtest.NamesKey(t, tc.key, err)
		if strings.Contains(err.Error(), imTestSecret) {
			t.Errorf("%s: error holds the secret key: %v", tc.key, err)
		}
	}
}

// Tencent's own limits bound im.*: a message of 12 KB and a group id of 48
// printable ASCII bytes are accepted at the limit, and a publisher that
// delivers nothing is not stopped by them.
func TestIMWiringTencentLimits(t *testing.T) {
	cfg := imWiringConfig()
	cfg.IM.MaxMessageBytes = tencentim.MaxMessageBytesLimit
	cfg.IM.GroupIDPrefix = strings.Repeat("~", tencentim.MaxGroupIDBytes-1)
	if _, err := imoutbox.ConfigFrom(&cfg, imoutbox.Config{}); err != nil {
		t.Fatalf("at Tencent's limits: %v", err)
	}
	cfg.IM.GroupIDPrefix = "房间-"
	cfg.OutboxWorker.Enabled = false
	if _, err := imoutbox.ConfigFrom(&cfg, imoutbox.Config{}); err != nil {
		t.Fatalf("delivery off: %v", err)
	}
}

// One MySQL connection is refused only for the scan fallback, whose lock
// would hold it (TestScanFallbackNeedsTwoConnections).
func TestIMWiringOneConnectionWithoutFallback(t *testing.T) {
	cfg := imWiringConfig()
	cfg.MySQL.MaxOpenConns, cfg.IM.ScanFallbackAfter = 1, 0
	if _, err := imoutbox.ConfigFrom(&cfg, imoutbox.Config{}); err != nil {
		t.Fatalf("one connection, no scan fallback: %v", err)
	}
}

// Delivering needs the IM credentials: both are
// named when missing, the secret never.
func TestIMWiringNeedsCredentialsToDeliver(t *testing.T) {
	cfg := config.Default()
	_, err := imoutbox.ConfigFrom(&cfg, imoutbox.Config{})
	if keys := cfgerr.Keys(err); !slices.Contains(keys, "im.sdk_app_id") || !slices.Contains(keys, "im.secret_key") {
		t.Fatalf("want im.sdk_app_id and im.secret_key required, got %v", err)
	}
	cfg.IM.SecretKey = imTestSecret
	_, err = imoutbox.ConfigFrom(&cfg, imoutbox.Config{})
	if keys := cfgerr.Keys(err); !slices.Equal(keys, []string{"im.sdk_app_id"}) || strings.Contains(err.Error(), imTestSecret) {
		t.Fatalf("want only im.sdk_app_id, never the secret: %v", err)
	}
}
