package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestDefaultIsValid(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults must validate: %v", err)
	}
	// Seed 000: room-service publishes itself; the fast path waits for it.
	if c.IM.FastPathDelay.D() != 3*time.Second || c.OutboxWorker.ClaimGrace < c.IM.FastPathDelay {
		t.Fatalf("im.fast_path_delay %s, outbox_worker.claim_grace %s", c.IM.FastPathDelay, c.OutboxWorker.ClaimGrace)
	}
}

// Every validation rule, each with the key its error must name.
func TestValidateNamesTheKey(t *testing.T) {
	cases := []struct {
		key string
		mut func(*Config)
	}{
		{"app_code", func(c *Config) { c.AppCode = "" }},
		{"app_code", func(c *Config) { c.AppCode = strings.Repeat("a", 33) }},
		{"log.level", func(c *Config) { c.Log.Level = "loud" }},
		{"log.format", func(c *Config) { c.Log.Format = "xml" }},
		{"metrics.addr", func(c *Config) { c.Metrics.Addr = "9090" }},
		{"kafka.brokers", func(c *Config) { c.Kafka.Brokers = nil }},
		{"kafka.brokers", func(c *Config) { c.Kafka.Brokers = []string{"nohost"} }},
		{"kafka.client_id", func(c *Config) { c.Kafka.ClientID = "" }},
		{"kafka.partitions", func(c *Config) { c.Kafka.Partitions = 0 }},
		{"kafka.replication_factor", func(c *Config) { c.Kafka.ReplicationFactor = 0 }},
		{"kafka.replication_factor", func(c *Config) { c.Kafka.ReplicationFactor = -2 }},
		{"kafka.session_timeout", func(c *Config) { c.Kafka.SessionTimeout = Duration(500 * time.Millisecond) }},
		{"kafka.session_timeout", func(c *Config) { c.Kafka.SessionTimeout = Duration(time.Hour) }},
		{"kafka.topics.room_events", func(c *Config) { c.Kafka.Topics.RoomEvents = "" }},
		{"kafka.topics.dlq", func(c *Config) { c.Kafka.Topics.DLQ = "bad topic!" }},
		{"kafka.topics.mic_ledger", func(c *Config) { c.Kafka.Topics.MicLedger = c.Kafka.Topics.RoomEvents }},
		{"mysql.dsn", func(c *Config) { c.MySQL.DSN = "" }},
		{"mysql.dsn", func(c *Config) { c.MySQL.DSN = "not a dsn" }},
		{"mysql.max_open_conns", func(c *Config) { c.MySQL.MaxOpenConns = 0 }},
		{"mysql.max_idle_conns", func(c *Config) { c.MySQL.MaxIdleConns = -1 }},
		{"mysql.conn_max_lifetime", func(c *Config) { c.MySQL.ConnMaxLife = 0 }},
		{"shutdown.timeout", func(c *Config) { c.Shutdown.Timeout = 0 }},
		{"relay.batch_size", func(c *Config) { c.Relay.BatchSize = 0 }},
		{"relay.poll_interval", func(c *Config) { c.Relay.PollInterval = -1 }},
		{"relay.gap_max_age", func(c *Config) { c.Relay.GapMaxAge = 0 }},
		{"relay.max_open_gaps", func(c *Config) { c.Relay.MaxOpenGaps = 0 }},
		{"relay.failover_timeout", func(c *Config) { c.Relay.FailoverTimeout = 0 }},
		{"relay.failover_timeout", func(c *Config) { c.Relay.FailoverTimeout = Duration(100 * time.Millisecond) }},
		{"relay.transactional_id", func(c *Config) { c.Relay.TransactionalID = "" }},
		{"relay.max_record_bytes", func(c *Config) { c.Relay.MaxRecordBytes = 0 }},
		{"relay.max_batch_bytes", func(c *Config) { c.Relay.MaxBatchBytes = 0 }},
		{"relay.routes", func(c *Config) { c.Relay.Routes = map[string]string{"": "x"} }},
		{"relay.routes.RoomGiftSent", func(c *Config) { c.Relay.Routes = map[string]string{"RoomGiftSent": "no spaces"} }},
		{"sink.batch_size", func(c *Config) { c.Sink.BatchSize = 0 }},
		{"sink.flush_interval", func(c *Config) { c.Sink.FlushInterval = 0 }},
		{"sink.group", func(c *Config) { c.Sink.Group = "" }},
		{"sink.max_retries", func(c *Config) { c.Sink.MaxRetries = 0 }},
		{"api.addr", func(c *Config) { c.API.Addr = "localhost" }},
		{"api.app_addr", func(c *Config) { c.API.AppAddr = "8081" }},
		{"api.app_addr", func(c *Config) { c.API.AppAddr = c.API.Addr }},
		{"api.grpc_addr", func(c *Config) { c.API.GRPCAddr = "grpc" }},
		{"api.grpc_addr", func(c *Config) { c.API.GRPCAddr = c.API.AppAddr }},
		{"api.user_header", func(c *Config) { c.API.UserHeader = "" }},
		{"api.user_header", func(c *Config) { c.API.UserHeader = "X User" }},
		{"api.app_code_header", func(c *Config) { c.API.AppCodeHeader = "X-App:Code" }},
		{"api.app_code_header", func(c *Config) { c.API.AppCodeHeader = "x-user-id" }},
		{"outbox_worker.retry_strategy", func(c *Config) { c.OutboxWorker.RetryStrategy = "exponential" }},
		{"outbox_worker.claim_grace", func(c *Config) { c.OutboxWorker.ClaimGrace = 0 }},
		{"outbox_worker.claim_grace", func(c *Config) { c.OutboxWorker.ClaimGrace = Duration(time.Second) }},
		{"outbox_worker.lock_ttl", func(c *Config) { c.OutboxWorker.LockTTL = 0 }},
		{"outbox_worker.lock_ttl", func(c *Config) { c.OutboxWorker.LockTTL = c.OutboxWorker.PublishTimeout }},
		{"outbox_worker.group", func(c *Config) { c.OutboxWorker.Group = "" }},
		{"im.endpoint", func(c *Config) { c.IM.Endpoint = "ftp://x" }},
		{"im.endpoint", func(c *Config) { c.IM.Endpoint = "http://" }},
		{"im.sdk_app_id", func(c *Config) { c.IM.SDKAppID = -1 }},
		{"im.sdk_app_id", func(c *Config) { c.IM.SDKAppID = 1 << 33 }},
		{"im.admin_identifier", func(c *Config) { c.IM.AdminIdentifier = "" }},
		{"im.usersig_ttl", func(c *Config) { c.IM.UserSigTTL = 0 }},
		{"im.usersig_ttl", func(c *Config) { c.IM.UserSigTTL = Duration(time.Minute) }},
		{"im.max_calls_per_second", func(c *Config) { c.IM.MaxCallsPerSecond = 0 }},
		{"im.max_messages_per_group_per_second", func(c *Config) { c.IM.MaxMessagesPerGroupPerSecond = 0 }},
		{"im.max_message_bytes", func(c *Config) { c.IM.MaxMessageBytes = 0 }},
		{"im.fast_path_delay", func(c *Config) { c.IM.FastPathDelay = -1 }},
		{"im.fast_path_delay", func(c *Config) { c.IM.FastPathDelay = Duration(time.Hour) }},
	}
	for _, tc := range cases {
		c := Default()
		tc.mut(&c)
		err := c.Validate()
		if err == nil {
			t.Errorf("%s: invalid value accepted", tc.key)
			continue
		}
		if !hasKey(err, tc.key) {
			t.Errorf("%s: error does not name the key: %v", tc.key, err)
		}
		if !strings.Contains(err.Error(), "config: "+tc.key+": ") {
			t.Errorf("%s: message %q does not start with the key", tc.key, err)
		}
	}
}

func hasKey(err error, key string) bool {
	var fe *FieldError
	for _, e := range flatten(err) {
		if errors.As(e, &fe) && fe.Key == key {
			return true
		}
	}
	return false
}

func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

func TestValidateJoinsEveryProblem(t *testing.T) {
	c := Default()
	c.Relay.BatchSize = 0
	c.Sink.BatchSize = 0
	err := c.Validate()
	if !hasKey(err, "relay.batch_size") || !hasKey(err, "sink.batch_size") {
		t.Fatalf("want both keys named, got %v", err)
	}
}

func TestValidateIM(t *testing.T) {
	c := Default()
	err := c.ValidateIM()
	if !hasKey(err, "im.sdk_app_id") || !hasKey(err, "im.secret_key") {
		t.Fatalf("want sdk_app_id and secret_key required, got %v", err)
	}
	c.IM.SDKAppID, c.IM.SecretKey = 1400000000, "k"
	if err := c.ValidateIM(); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "roomflow.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestLoadFileAndEnvOverrides(t *testing.T) {
	p := writeFile(t, `
app_code: fileapp
kafka:
  brokers: ["file:9092"]
  partitions: 24
relay:
  batch_size: 500
  poll_interval: 250ms
  gap_max_age: 2h
mic:
  publishing_session_max_age: 6h
  compensation_enabled: false
outbox_worker:
  enabled: false
im:
  fast_path_delay: 0s
api:
  app_addr: ""
  grpc_addr: "127.0.0.1:7000"
  user_header: X-Auth-User
`)
	cfg, err := Load(p, env(map[string]string{
		"ROOMFLOW_KAFKA_BROKERS":       " a:1, b:2 ,",
		"ROOMFLOW_MYSQL_DSN":           "u:p@tcp(db:3306)/rf",
		"ROOMFLOW_METRICS_ADDR":        "127.0.0.1:9999",
		"ROOMFLOW_IM_ENDPOINT":         "http://127.0.0.1:1",
		"ROOMFLOW_IM_SDK_APP_ID":       "1400000001",
		"ROOMFLOW_IM_ADMIN_IDENTIFIER": "ops",
		"ROOMFLOW_IM_SECRET_KEY":       "s3cret",
		"ROOMFLOW_APP_CODE":            "envapp",
	}))
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"brokers", strings.Join(cfg.Kafka.Brokers, ","), "a:1,b:2"},
		{"partitions", cfg.Kafka.Partitions, int32(24)},
		{"dsn", cfg.MySQL.DSN, "u:p@tcp(db:3306)/rf"},
		{"metrics", cfg.Metrics.Addr, "127.0.0.1:9999"},
		{"im endpoint", cfg.IM.Endpoint, "http://127.0.0.1:1"},
		{"sdk app id", cfg.IM.SDKAppID, int64(1400000001)},
		{"admin", cfg.IM.AdminIdentifier, "ops"},
		{"secret", cfg.IM.SecretKey, "s3cret"},
		{"app_code", cfg.AppCode, "envapp"},
		{"batch", cfg.Relay.BatchSize, 500},
		{"poll", cfg.Relay.PollInterval.D(), 250 * time.Millisecond},
		{"gap", cfg.Relay.GapMaxAge.D(), 2 * time.Hour},
		{"mic max window", cfg.Mic.PublishingSessionMaxAge.D(), 6 * time.Hour},
		{"untouched default", cfg.Mic.PendingPublishMaxAge.D(), 2 * time.Minute},
		{"mic compensation switch", cfg.Mic.CompensationEnabled, false},
		{"mic compensation on by default (seed 001)", Default().Mic.CompensationEnabled, true},
		{"worker enabled", cfg.OutboxWorker.Enabled, false},
		{"fast path delay 0 is kept (claim at once)", cfg.IM.FastPathDelay.D(), time.Duration(0)},
		{"api app listener disabled", cfg.API.AppAddr, ""},
		{"api grpc", cfg.API.GRPCAddr, "127.0.0.1:7000"},
		{"api user header", cfg.API.UserHeader, "X-Auth-User"},
		{"api default internal listener", cfg.API.Addr, ":8080"},
		{"api default app code header", cfg.API.AppCodeHeader, "X-App-Code"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %v want %v", c.name, c.got, c.want)
		}
	}
}

func TestLoadMetricsAddrDash(t *testing.T) {
	cfg, err := Load("", env(map[string]string{"ROOMFLOW_METRICS_ADDR": "-"}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Metrics.Addr != "" {
		t.Fatalf("- must disable the metrics server, got %q", cfg.Metrics.Addr)
	}
}

func TestLoadRejects(t *testing.T) {
	cases := []struct {
		name, body string
		env        map[string]string
		want       string
	}{
		{"unknown key", "relay:\n  batchsize: 3\n", nil, "batchsize"},
		{"bare integer duration", "relay:\n  poll_interval: 100\n", nil, "not a duration"},
		{"bad duration", "mic:\n  compensation_interval: soon\n", nil, "not a duration"},
		{"invalid value", "sink:\n  batch_size: -5\n", nil, "sink.batch_size"},
		{"bad sdk app id env", "", map[string]string{"ROOMFLOW_IM_SDK_APP_ID": "abc"}, "im.sdk_app_id"},
		{"retry strategy", "outbox_worker:\n  retry_strategy: exponential_backoff\n", nil, "outbox_worker.retry_strategy"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(writeFile(t, tc.body), env(tc.env))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want error containing %q, got %v", tc.want, err)
			}
		})
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml"), env(nil)); err == nil {
		t.Fatal("a missing config file must be an error")
	}
}

// Seed 000: outbox_worker values <= 0 fall back to the defaults.
func TestOutboxWorkerFallbacks(t *testing.T) {
	cfg, err := Load(writeFile(t, `
outbox_worker:
  poll_interval: 0s
  batch_size: -3
  publish_timeout: -1s
  retry_strategy: ""
`), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	w := cfg.OutboxWorker
	if w.PollInterval.D() != time.Second || w.BatchSize != 100 || w.PublishTimeout.D() != 3*time.Second {
		t.Fatalf("fallbacks not applied: %+v", w)
	}
}

func TestEmptyFileIsDefaults(t *testing.T) {
	cfg, err := Load(writeFile(t, ""), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Relay.BatchSize != 1000 {
		t.Fatalf("got %d", cfg.Relay.BatchSize)
	}
}

func TestRedactedHidesSecrets(t *testing.T) {
	c := Default()
	c.MySQL.DSN = "app:hunter2@tcp(db:3306)/rf?parseTime=true"
	c.IM.SecretKey = "topsecretkey"
	out, err := c.YAML()
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	for _, secret := range []string{"hunter2", "topsecretkey"} {
		if strings.Contains(s, secret) {
			t.Fatalf("secret %q printed:\n%s", secret, s)
		}
	}
	if !strings.Contains(s, "app:REDACTED@tcp(db:3306)/rf") {
		t.Fatalf("dsn not shown redacted:\n%s", s)
	}
	if c.MySQL.DSN != "app:hunter2@tcp(db:3306)/rf?parseTime=true" {
		t.Fatal("Redacted must not modify the receiver")
	}
	if RedactDSN("garbage with pass") != "REDACTED" {
		t.Fatal("an unparsable DSN must be hidden whole")
	}
}

func TestTopicsPrefix(t *testing.T) {
	ts := Default().Kafka.Topics.WithPrefix("x.")
	for _, s := range ts.List() {
		if !strings.HasPrefix(s.Name, "x.") {
			t.Fatalf("%s not prefixed: %s", s.Key, s.Name)
		}
	}
	n := 0
	for _, s := range ts.List() {
		if s.Compacted {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("want 2 compacted internal topics, got %d", n)
	}
}
