package main

import (
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/app"
	"github.com/hyapp/roomflow/internal/cfgerr"
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

// imErrKeys are the keys of the *cfgerr.FieldError in err.
func imErrKeys(err error) []string {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []string
		for _, e := range j.Unwrap() {
			out = append(out, imErrKeys(e)...)
		}
		return out
	}
	var fe *cfgerr.FieldError
	if errors.As(err, &fe) {
		return []string{fe.Key}
	}
	return nil
}

// The defaults with credentials pass publish-im's wiring and map every
// outbox_worker.* and im.* key.
func TestIMWiringDefaults(t *testing.T) {
	cfg := imWiringConfig()
	// Seed 000: room-service publishes itself; the fast path waits for it.
	if cfg.IM.FastPathDelay.D() != 3*time.Second || cfg.OutboxWorker.ClaimGrace < cfg.IM.FastPathDelay {
		t.Fatalf("im.fast_path_delay %s, outbox_worker.claim_grace %s", cfg.IM.FastPathDelay, cfg.OutboxWorker.ClaimGrace)
	}
	cfg.OutboxWorker.NodeID, cfg.IM.GroupIDPrefix, cfg.IM.MarkPermanentFailed = "node-1", "room-", true
	c, err := imPublisherConfig(&app.Deps{Config: &cfg}, "pod-0-publish-im")
	if err != nil {
		t.Fatalf("defaults must pass publish-im's wiring: %v", err)
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
	if strings.Join(c.Kafka.Brokers, ",") != strings.Join(cfg.Kafka.Brokers, ",") || c.Kafka.ClientID != cfg.Kafka.ClientID ||
		c.Kafka.SessionTimeout != cfg.Kafka.SessionTimeout.D() {
		t.Errorf("kafka %+v from %+v", c.Kafka, cfg.Kafka)
	}
	if c.Registerer != nil || c.Kafka.Metrics != nil {
		t.Error("a Deps without a registry must give no registerer (not a nil *Registry in an interface)")
	}
	d := app.NewDeps(&cfg, slog.New(slog.DiscardHandler))
	if c, err := imPublisherConfig(d, ""); err != nil || c.Registerer == nil || c.Kafka.Metrics == nil || c.Logger != d.Log || c.Kafka.Logger != d.Log {
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
// error must name (internal/config's Validate and ValidateIM held them
// before the publisher owned them).
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
		{"im.fast_path_delay", func(c *config.Config) { c.IM.FastPathDelay = -1 }},
		{"im.fast_path_delay", func(c *config.Config) { c.IM.FastPathDelay = config.Duration(time.Hour) }},
		{"shutdown.timeout", func(c *config.Config) { c.Shutdown.Timeout = -1 }},
		{"kafka.topics.room_events", func(c *config.Config) { c.Kafka.Topics.RoomEvents = "" }},
		{"kafka.brokers", func(c *config.Config) { c.Kafka.Brokers = nil }},
	}
	for _, tc := range cases {
		cfg := imWiringConfig()
		tc.mut(&cfg)
		_, err := imPublisherConfig(&app.Deps{Config: &cfg}, "")
		if err == nil {
			t.Errorf("%s: invalid value accepted", tc.key)
			continue
		}
		if !slices.Contains(imErrKeys(err), tc.key) {
			t.Errorf("%s: error does not name the key: %v", tc.key, err)
		}
		if !strings.Contains(err.Error(), "config: "+tc.key+": ") {
			t.Errorf("%s: message %q does not start with the key", tc.key, err)
		}
		if strings.Contains(err.Error(), imTestSecret) {
			t.Errorf("%s: error holds the secret key: %v", tc.key, err)
		}
	}
}

// Delivering needs the IM credentials (what ValidateIM checked): both are
// named when missing, the secret never.
func TestIMWiringNeedsCredentialsToDeliver(t *testing.T) {
	cfg := config.Default()
	_, err := imPublisherConfig(&app.Deps{Config: &cfg}, "")
	if keys := imErrKeys(err); !slices.Contains(keys, "im.sdk_app_id") || !slices.Contains(keys, "im.secret_key") {
		t.Fatalf("want im.sdk_app_id and im.secret_key required, got %v", err)
	}
	cfg.IM.SecretKey = imTestSecret
	_, err = imPublisherConfig(&app.Deps{Config: &cfg}, "")
	if keys := imErrKeys(err); !slices.Equal(keys, []string{"im.sdk_app_id"}) || strings.Contains(err.Error(), imTestSecret) {
		t.Fatalf("want only im.sdk_app_id, never the secret: %v", err)
	}
}

// With outbox_worker.enabled=false publish-im delivers nothing, so im.*
// and the fast path's keys cannot stop it; and no other command looks at
// im.* at all: a config with bad IM keys loads.
func TestIMWiringBadIMKeysStopOnlyDelivery(t *testing.T) {
	const badIM = "im:\n  endpoint: ftp://x\n  usersig_ttl: 1m\n  max_calls_per_second: -1\n  fast_path_delay: 1h\n"
	if _, err := runCLI(t, badIM, "config"); err != nil {
		t.Fatalf("a bad im.* key must not stop a command that does not deliver: %v", err)
	}
	cfg, err := config.Load(writeConfig(t, badIM+"outbox_worker:\n  enabled: false\n"), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := imPublisherConfig(&app.Deps{Config: cfg}, ""); err != nil {
		t.Fatalf("publish-im with delivery off and bad im.* keys: %v", err)
	}
	// Its own service's settings are still checked.
	cfg.OutboxWorker.RetryStrategy = "exponential"
	if _, err := imPublisherConfig(&app.Deps{Config: cfg}, ""); !slices.Contains(imErrKeys(err), "outbox_worker.retry_strategy") {
		t.Fatalf("delivery off, unknown retry strategy: %v", err)
	}
	cfg.OutboxWorker.Enabled, cfg.OutboxWorker.RetryStrategy = true, ""
	_, err = imPublisherConfig(&app.Deps{Config: cfg}, "")
	for _, key := range []string{"im.endpoint", "im.usersig_ttl", "im.max_calls_per_second", "im.fast_path_delay"} {
		if !slices.Contains(imErrKeys(err), key) {
			t.Errorf("delivering: %s not named in %v", key, err)
		}
	}
}

// Seed 000: outbox_worker poll_interval, batch_size and publish_timeout
// <= 0 fall back to the defaults (imoutbox applies the rule), so the
// wiring accepts them; lock_ttl is compared with the publish_timeout in
// effect.
func TestIMWiringSeed000Fallbacks(t *testing.T) {
	getenv := func(k string) string {
		return map[string]string{"ROOMFLOW_IM_SDK_APP_ID": "1400000000", "ROOMFLOW_IM_SECRET_KEY": imTestSecret}[k]
	}
	load := func(yaml string) *config.Config {
		cfg, err := config.Load(writeConfig(t, yaml), getenv)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	cfg := load("outbox_worker:\n  poll_interval: 0s\n  batch_size: -3\n  publish_timeout: -1s\n  retry_strategy: \"\"\n")
	if _, err := imPublisherConfig(&app.Deps{Config: cfg}, ""); err != nil {
		t.Fatalf("values <= 0 fall back, they are no error: %v", err)
	}
	cfg = load("outbox_worker:\n  publish_timeout: 0s\n  lock_ttl: 2s\n")
	if _, err := imPublisherConfig(&app.Deps{Config: cfg}, ""); !slices.Contains(imErrKeys(err), "outbox_worker.lock_ttl") {
		t.Fatalf("lock_ttl 2s under the default publish_timeout 3s: %v", err)
	}
	// An unknown strategy loads (it is no app-wide key) and stops
	// publish-im.
	cfg = load("outbox_worker:\n  retry_strategy: exponential_backoff\n")
	if _, err := imPublisherConfig(&app.Deps{Config: cfg}, ""); !slices.Contains(imErrKeys(err), "outbox_worker.retry_strategy") {
		t.Fatalf("unknown retry strategy: %v", err)
	}
}

// `roomflow publish-im` stops at start on a bad IM value or missing
// credentials, before it opens MySQL, naming the key.
func TestPublishIMCommandRefusesBadConfig(t *testing.T) {
	// Nothing listens on the DSN's address: the command must not get that far.
	base := "log:\n  level: error\nmetrics:\n  addr: \"\"\nmysql:\n  dsn: \"nobody@tcp(" + sinkFreeAddr(t) + ")/none\"\n"
	for _, tc := range []struct{ yaml, key string }{
		{"im:\n  sdk_app_id: 1400000000\n  secret_key: k\n  usersig_ttl: 1m\n", "im.usersig_ttl"},
		{"", "im.secret_key"},
	} {
		_, err := runCLI(t, base+tc.yaml, "publish-im")
		if err == nil || !strings.Contains(err.Error(), "config: "+tc.key+": ") {
			t.Fatalf("roomflow publish-im: %v, want a %s error", err, tc.key)
		}
		if strings.Contains(err.Error(), "mysql:") {
			t.Fatalf("roomflow publish-im opened MySQL before checking its config: %v", err)
		}
	}
}
