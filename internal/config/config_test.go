package config

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/kafkax"
)

func TestDefaultIsValid(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults must validate: %v", err)
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
		// The Kafka client refuses a port it cannot parse at its first
		// client (exit 1, no key named), and dials port 0, one past 65535
		// or an empty host for ever.
		{"kafka.brokers", func(c *Config) { c.Kafka.Brokers = []string{"kafka:"} }},
		{"kafka.brokers", func(c *Config) { c.Kafka.Brokers = []string{"kafka:x"} }},
		{"kafka.brokers", func(c *Config) { c.Kafka.Brokers = []string{"kafka:0"} }},
		{"kafka.brokers", func(c *Config) { c.Kafka.Brokers = []string{"kafka:70000"} }},
		{"kafka.brokers", func(c *Config) { c.Kafka.Brokers = []string{":9092"} }},
		{"kafka.client_id", func(c *Config) { c.Kafka.ClientID = "" }},
		{"kafka.client_id", func(c *Config) { c.Kafka.ClientID = strings.Repeat("c", kafkax.MaxClientIDPrefix+1) }},
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
		{"shutdown.drain_delay", func(c *Config) { c.Shutdown.DrainDelay = Duration(-time.Second) }},
		{"api.addr", func(c *Config) { c.API.Addr = "localhost" }},
		{"api.app_addr", func(c *Config) { c.API.AppAddr = "8081" }},
		{"api.app_addr", func(c *Config) { c.API.AppAddr = c.API.Addr }},
		{"api.grpc_addr", func(c *Config) { c.API.GRPCAddr = "grpc" }},
		{"api.grpc_addr", func(c *Config) { c.API.GRPCAddr = c.API.AppAddr }},
	}
	for _, tc := range cases {
		c := Default()
		tc.mut(&c)
		err := c.Validate()
		if err == nil {
			t.Errorf("%s: invalid value accepted", tc.key)
			continue
		}
		if !slices.Contains(cfgerr.Keys(err), tc.key) {
			t.Errorf("%s: error does not name the key: %v", tc.key, err)
		}
		if !strings.Contains(err.Error(), "config: "+tc.key+": ") {
			t.Errorf("%s: message %q does not start with the key", tc.key, err)
		}
	}
}

func TestValidateJoinsEveryProblem(t *testing.T) {
	c := Default()
	c.MySQL.MaxOpenConns = 0
	c.Shutdown.Timeout = 0
	err := c.Validate()
	if !slices.Contains(cfgerr.Keys(err), "mysql.max_open_conns") || !slices.Contains(cfgerr.Keys(err), "shutdown.timeout") {
		t.Fatalf("want both keys named, got %v", err)
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
		"ROOMFLOW_LUCKY_AUDIT_KEY":     "audit-k",
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
		{"audit key", cfg.Lucky.AuditKey, "audit-k"},
		{"app_code", cfg.AppCode, "envapp"},
		{"batch", cfg.Relay.BatchSize, 500},
		{"poll", cfg.Relay.PollInterval.D(), 250 * time.Millisecond},
		{"gap", cfg.Relay.GapMaxAge.D(), 2 * time.Hour},
		{"mic max window", cfg.Mic.PublishingSessionMaxAge.D(), 6 * time.Hour},
		{"untouched default", cfg.Mic.PendingPublishMaxAge.D(), 2 * time.Minute},
		{"mic compensation switch", cfg.Mic.CompensationEnabled, false},
		{"mic compensation on by default (MIC-10)", Default().Mic.CompensationEnabled, true},
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
		{"invalid value", "mysql:\n  max_open_conns: -5\n", nil, "mysql.max_open_conns"},
		{"bad sdk app id env", "", map[string]string{"ROOMFLOW_IM_SDK_APP_ID": "abc"}, "im.sdk_app_id"},
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
	c.Lucky.AuditKey = "auditkey123"
	c.Relay.Binlog.DSN = "repl:replpw9@tcp(db:3306)/"
	out, err := c.YAML()
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	for _, secret := range []string{"hunter2", "topsecretkey", "auditkey123", "replpw9"} {
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
	if n != 4 {
		t.Fatalf("want 4 compacted topics (2 internal, the 2 totals), got %d", n)
	}
	var c Config = Default()
	for _, s := range c.TopicLayout().Topics {
		if s.Key == "mic_daily_totals" && (s.Configs["cleanup.policy"] != "compact,delete" || s.Configs["retention.ms"] != "259200000") {
			t.Fatalf("daily totals topic configs %v, want compact,delete with mic.day_totals_retention", s.Configs)
		}
	}
}

func TestLoggerJSON(t *testing.T) {
	var buf bytes.Buffer
	log := LogConfig{Level: "warn", Format: "json"}.Logger(&buf)
	log.Info("dropped")
	log.Warn("kept", "component", "relay", "event_id", "e1")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("level filter: %q", buf.String())
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &m); err != nil {
		t.Fatal(err)
	}
	if m["msg"] != "kept" || m["component"] != "relay" || m["event_id"] != "e1" {
		t.Fatalf("fields: %v", m)
	}
}

// Every kind of decode mistake names its dotted key, and every mistake of
// a file is reported at once.
func TestLoadNamesTheKeyOfDecodeErrors(t *testing.T) {
	cases := []struct {
		name, body string
		key        string // the dotted key the message must name
		want       string // and this detail
	}{
		{"unknown key depth 1", "relays:\n  batch_size: 3\n", "relays", "unknown key (line 1)"},
		{"unknown key depth 2", "relay:\n  batch_sise: 3\n", "relay.batch_sise", "unknown key (line 2)"},
		{"unknown key depth 3", "kafka:\n  topics:\n    room_event: x\n", "kafka.topics.room_event", "unknown key (line 3)"},
		{"unknown key depth 3 flow", "lucky: {switches: {global_enabled: true}}\n", "lucky.switches.global_enabled", "unknown key"},
		{"wrong type: map for int", "relay:\n  batch_size: {a: 1}\n", "relay.batch_size", "line 2"},
		{"wrong type: scalar for section", "relay: 5\n", "relay", "line 1"},
		{"wrong type: bool", "mic:\n  compensation_enabled: maybe\n", "mic.compensation_enabled", "cannot unmarshal"},
		{"wrong type: list for string", "app_code: [a, b]\n", "app_code", "cannot unmarshal"},
		{"bad duration", "mic:\n  compensation_interval: soon\n", "mic.compensation_interval", "not a duration"},
		{"bare integer duration", "relay:\n  poll_interval: 100\n", "relay.poll_interval", "not a duration"},
		{"bad int", "sink:\n  batch_size: lots\n", "sink.batch_size", "cannot unmarshal"},
		{"int out of range", "kafka:\n  replication_factor: 70000\n", "kafka.replication_factor", "cannot unmarshal"},
		{"bad list element", "kafka:\n  brokers: [a:1, {x: 1}]\n", "kafka.brokers[1]", "cannot unmarshal"},
		{"bad map value", "relay:\n  routes:\n    RoomGiftSent: [x]\n", "relay.routes.RoomGiftSent", "cannot unmarshal"},
		{"unknown key in merged anchor", "base: &b\n  batch_sise: 1\n", "base", "unknown key"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(writeFile(t, tc.body), env(nil))
			if err == nil {
				t.Fatal("accepted")
			}
			msg := err.Error()
			if !strings.Contains(msg, "config: "+tc.key+": ") || !strings.Contains(msg, tc.want) {
				t.Fatalf("want key %q and %q in the error, got %q", tc.key, tc.want, msg)
			}
			if !slices.Contains(cfgerr.Keys(err), tc.key) {
				t.Fatalf("cfgerr.Keys = %v, want %q among them", cfgerr.Keys(err), tc.key)
			}
			if !cfgerr.IsUsage(err) {
				t.Fatalf("a decode error must be a usage error (exit 2): %T", err)
			}
		})
	}
}

// A secret in a misshapen section (a DSN given as mysql itself) is not
// quoted back: yaml's type errors quote up to 7 characters of the value.
func TestDecodeErrorsQuoteNoValue(t *testing.T) {
	body := "mysql: \"app:hunter2@tcp(db:3306)/rf\"\nrelay:\n  binlog: \"repl:pw@tcp(db:3306)/\"\nim: 5bd2850fff3ecb11\n"
	_, err := Load(writeFile(t, body), env(nil))
	if got := cfgerr.Keys(err); !slices.Equal(got, []string{"mysql", "relay.binlog", "im"}) {
		t.Fatalf("keys %v (%v)", got, err)
	}
	for _, s := range []string{"hun", "repl:pw", "5bd2850"} {
		if strings.Contains(err.Error(), s) {
			t.Fatalf("the error quotes %q: %v", s, err)
		}
	}
}

func TestLoadReportsEveryDecodeMistake(t *testing.T) {
	body := "relay:\n  batch_sise: 3\n  poll_interval: soon\nsink:\n  batch_size: x\n"
	_, err := Load(writeFile(t, body), env(nil))
	got := cfgerr.Keys(err)
	want := []string{"relay.batch_sise", "relay.poll_interval", "sink.batch_size"}
	if !slices.Equal(got, want) {
		t.Fatalf("keys %v, want %v (error %v)", got, want, err)
	}
}

// Merge keys and aliases decode as before: the check follows them.
func TestLoadFollowsMergeKeys(t *testing.T) {
	body := "x: &common\n  batch_size: 7\n"
	if _, err := Load(writeFile(t, body), env(nil)); err == nil {
		t.Fatal("x is no key of the config")
	}
	body = "relay: &r\n  batch_size: 7\nsink:\n  <<: *r\n  group: g\n"
	cfg, err := Load(writeFile(t, body), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Sink.BatchSize != 7 || cfg.Sink.Group != "g" || cfg.Relay.BatchSize != 7 {
		t.Fatalf("merge: sink %+v relay batch %d", cfg.Sink, cfg.Relay.BatchSize)
	}
	body = "relay: &r\n  batch_size: 7\n  gap_max_age: 1h\nsink:\n  <<: *r\n"
	_, err = Load(writeFile(t, body), env(nil))
	if !slices.Contains(cfgerr.Keys(err), "sink.gap_max_age") {
		t.Fatalf("a merged key the target lacks must be named: %v", err)
	}
}

func TestLoadReadErrorIsUsage(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "missing.yaml"), env(nil))
	if !cfgerr.IsUsage(err) {
		t.Fatalf("a missing config file is a usage error: %v", err)
	}
	_, err = Load(writeFile(t, "relay: [\n"), env(nil))
	if err == nil || !cfgerr.IsUsage(err) {
		t.Fatalf("a syntax error is a usage error: %v", err)
	}
}
