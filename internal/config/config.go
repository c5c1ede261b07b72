// Package config is roomflow's one configuration: a YAML file, environment
// overrides for what differs per deployment, documented defaults for every
// key, and validation that names the offending key.
//
// Load returns a Config that has passed Validate; a process that cannot load
// its config must not start. Durations are strings such as "500ms" or "12h".
// Unknown keys are an error, so a misspelt key never silently keeps a default.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/tlsx"
)

// Config is the effective configuration of every roomflow component.
type Config struct {
	// AppCode is the app_code of every input that carries none, at every
	// stage (processors, sink, IM publisher, verify, loadgen, stats API), so
	// an empty app_code and the configured one give the same facts.
	// Env: ROOMFLOW_APP_CODE.
	AppCode string `yaml:"app_code"`

	Log     LogConfig     `yaml:"log"`
	Metrics MetricsConfig `yaml:"metrics"`
	Kafka   KafkaConfig   `yaml:"kafka"`
	// SchemaRegistry is where the public topics' schemas are registered.
	SchemaRegistry SchemaRegistryConfig `yaml:"schema_registry"`
	MySQL          MySQLConfig          `yaml:"mysql"`
	Shutdown       ShutdownConfig       `yaml:"shutdown"`
	Relay          RelayConfig          `yaml:"relay"`
	Process        ProcessConfig        `yaml:"process"`
	Mic            MicConfig            `yaml:"mic"`
	Sink           SinkConfig           `yaml:"sink"`
	API            APIConfig            `yaml:"api"`
	OutboxWorker   OutboxWorkerConfig   `yaml:"outbox_worker"`
	IM             IMConfig             `yaml:"im"`
	Lucky          LuckyConfig          `yaml:"lucky"`
	Purge          PurgeConfig          `yaml:"purge"`
}

// LogConfig selects the slog handler.
type LogConfig struct {
	Level  string `yaml:"level"`  // debug|info|warn|error; default info
	Format string `yaml:"format"` // json|text; default json
}

// Logger returns the process logger per log.level and log.format,
// writing to w.
func (l LogConfig) Logger(w io.Writer) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(strings.ToUpper(l.Level))) // validated by Validate
	opts := &slog.HandlerOptions{Level: lvl}
	if l.Format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// MetricsConfig is the shared HTTP server for /metrics, /healthz, /readyz.
type MetricsConfig struct {
	// Addr is host:port; empty disables the server. Env: ROOMFLOW_METRICS_ADDR.
	Addr string `yaml:"addr"`
}

// KafkaConfig is the cluster and the topic names. Topic names are
// configurable but default to the design's contract names.
type KafkaConfig struct {
	Brokers           []string `yaml:"brokers"` // env: ROOMFLOW_KAFKA_BROKERS (comma separated)
	ClientID          string   `yaml:"client_id"`
	Partitions        int32    `yaml:"partitions"`         // default 12, for `roomflow topics`
	ReplicationFactor int16    `yaml:"replication_factor"` // default -1 = broker default
	// SessionTimeout is the consumer-group session of the room and mic
	// processors, the MySQL sink and publish-im (default 15s): how long a
	// crashed member's partitions stay unowned before the group moves them.
	// The relay's leader group follows relay.failover_timeout instead.
	SessionTimeout Duration `yaml:"session_timeout"`
	// TopicRetention is the retention.ms the cluster keeps the data topics
	// for (default 168h, Kafka's log.retention.hours). `roomflow topics`
	// sets none; it is what purge.* windows are checked against, since a
	// consumption row purged while its record can still be replayed would
	// let the record count twice. 0 or negative: kept forever
	// (retention.ms=-1), so no consumption table may be purged.
	TopicRetention Duration `yaml:"topic_retention"`
	Topics         Topics   `yaml:"topics"`
	// PublicWireFormat is how the public topics' values are written:
	// plain (the protobuf message) or confluent (framed with the schema
	// id, for Schema Registry consumers). Readers take both, per record.
	PublicWireFormat string `yaml:"public_wire_format"`
	// TLS and SASL secure every client of every command (off by default).
	TLS  KafkaTLSConfig  `yaml:"tls"`
	SASL KafkaSASLConfig `yaml:"sasl"`

	// loaded is what Validate read for TLS and SASL (see security.go):
	// behind a pointer, so printing a Config never shows a key or the
	// password.
	loaded *kafkaSecrets
}

// KafkaTLSConfig is kafka.tls: dial the brokers over TLS (a Strimzi tls
// listener). Its files are read once, by Validate: a missing or bad file
// stops the process at start, naming its key.
type KafkaTLSConfig struct {
	Enabled bool `yaml:"enabled"`
	// CAFile is the PEM CA bundle the brokers' certificates must chain to
	// (Strimzi: the <cluster>-cluster-ca-cert Secret's ca.crt); empty
	// trusts the system roots.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are the client certificate and key for mutual
	// TLS (Strimzi: a tls KafkaUser's user.crt and user.key); both or
	// neither.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName is the name the brokers' certificates are checked
	// against; empty: each broker's own host.
	ServerName string `yaml:"server_name"`
	// InsecureSkipVerify accepts any broker certificate (encrypted but not
	// authenticated); tests only.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

// KafkaSASLConfig is kafka.sasl: the login of every client (a Strimzi
// scram-sha-512 KafkaUser). The password is a secret and never in the
// YAML: Env ROOMFLOW_KAFKA_SASL_PASSWORD, else PasswordFile.
type KafkaSASLConfig struct {
	// Mechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; empty: no SASL.
	Mechanism string `yaml:"mechanism"`
	User      string `yaml:"user"`
	// PasswordFile holds the password (a mounted Secret; one trailing
	// newline is ignored). ROOMFLOW_KAFKA_SASL_PASSWORD wins over it.
	PasswordFile string `yaml:"password_file"`
}

// Topics names every topic of the design.
type Topics struct {
	RoomEvents       string `yaml:"room_events"`
	UserMicEvents    string `yaml:"user_mic_events"`
	MicLedger        string `yaml:"mic_ledger"`
	MicSessionClosed string `yaml:"mic_session_closed"`
	MicDailyStats    string `yaml:"mic_daily_stats"`
	MicLifetimeStats string `yaml:"mic_lifetime_stats"`
	// MicDailyTotals and MicLifetimeTotals are the compacted current-value
	// topics of the users' totals (mic processor, public).
	MicDailyTotals    string `yaml:"mic_daily_totals"`
	MicLifetimeTotals string `yaml:"mic_lifetime_totals"`
	LuckyPoolInflow   string `yaml:"lucky_pool_inflow"`
	LuckyEvents       string `yaml:"lucky_events"` // LuckyGiftDrawn, ... from roomflow lucky (LUCKY-12)
	DLQ               string `yaml:"dlq"`
	RelayOffsets      string `yaml:"relay_offsets"`       // compacted, internal: relay position
	MicStateChangelog string `yaml:"mic_state_changelog"` // compacted, internal: mic processor state
}

// MySQLConfig is the system of record for facts and the room_outbox source.
type MySQLConfig struct {
	DSN          string   `yaml:"dsn"` // env: ROOMFLOW_MYSQL_DSN; a secret (password redacted)
	MaxOpenConns int      `yaml:"max_open_conns"`
	MaxIdleConns int      `yaml:"max_idle_conns"`
	ConnMaxLife  Duration `yaml:"conn_max_lifetime"`
}

// ShutdownConfig bounds the drain on SIGTERM.
type ShutdownConfig struct {
	Timeout Duration `yaml:"timeout"`
	// DrainDelay keeps the listeners of a serving component (lucky, the
	// stats API) open, not ready, this long after SIGTERM while Kubernetes
	// takes the pod out of its Services' endpoints; 0 stops them at once.
	DrainDelay Duration `yaml:"drain_delay"`
}

// RelayConfig tunes `roomflow relay`.
type RelayConfig struct {
	BatchSize       int               `yaml:"batch_size"`
	PollInterval    Duration          `yaml:"poll_interval"`
	GapMaxAge       Duration          `yaml:"gap_max_age"`
	MaxOpenGaps     int               `yaml:"max_open_gaps"`
	FailoverTimeout Duration          `yaml:"failover_timeout"`
	TransactionalID string            `yaml:"transactional_id"`
	MaxRecordBytes  int               `yaml:"max_record_bytes"`
	MaxBatchBytes   int               `yaml:"max_batch_bytes"` // payload bytes one batch reads from MySQL
	Routes          map[string]string `yaml:"routes"`          // event_type -> topic; others go to kafka.topics.room_events
	Mode            string            `yaml:"mode"`            // poll | binlog
	Binlog          RelayBinlogConfig `yaml:"binlog"`
}

// RelayBinlogConfig tunes relay.mode binlog (the relay reads the row binlog
// of mysql.dsn's server as a replica).
type RelayBinlogConfig struct {
	// DSN is the replication user's DSN, for a least-privilege user with
	// only REPLICATION SLAVE and BINLOG MONITOR / REPLICATION CLIENT; empty:
	// mysql.dsn. Its address must be mysql.dsn's server. Env
	// ROOMFLOW_RELAY_BINLOG_DSN; a secret (password redacted).
	DSN             string   `yaml:"dsn"`
	ServerID        uint32   `yaml:"server_id"`        // required in binlog mode, no default
	SnapshotFromID  uint64   `yaml:"snapshot_from_id"` // first-start snapshot: ids above it (0: all)
	HeartbeatPeriod Duration `yaml:"heartbeat_period"`
}

// ProcessConfig tunes the exactly-once stream runtime shared by processors.
type ProcessConfig struct {
	CommitInterval Duration `yaml:"commit_interval"`
	CommitRecords  int      `yaml:"commit_records"`
	RoomGroup      string   `yaml:"room_group"`
	MicGroup       string   `yaml:"mic_group"`
	Only           string   `yaml:"only"` // ""|room|mic: which processors `roomflow process` runs
	RuleCacheSize  int      `yaml:"rule_cache_size"`
}

// MicConfig holds MIC-10's open-session compensation (D-MIC-1) and the
// retention knobs.
type MicConfig struct {
	PendingPublishMaxAge    Duration `yaml:"pending_publish_max_age"`
	PublishingSessionMaxAge Duration `yaml:"publishing_session_max_age"`
	// CompensationEnabled is MIC-10's switch of the open session
	// compensation: false = no timer closes.
	CompensationEnabled    bool     `yaml:"compensation_enabled"`
	CompensationInterval   Duration `yaml:"compensation_interval"`
	CompensationBatchSize  int      `yaml:"compensation_batch_size"`
	ClosedSessionRetention Duration `yaml:"closed_session_retention"`
	DayRoomRetention       Duration `yaml:"day_room_retention"`
	// TotalsEnabled keeps the users' totals in the mic state and publishes
	// them to kafka.topics.mic_daily_totals and mic_lifetime_totals.
	TotalsEnabled      bool     `yaml:"totals_enabled"`
	DayTotalsRetention Duration `yaml:"day_totals_retention"`
}

// SinkConfig tunes `roomflow sink`.
type SinkConfig struct {
	BatchSize     int      `yaml:"batch_size"`
	FlushInterval Duration `yaml:"flush_interval"`
	Group         string   `yaml:"group"`
	MaxRetries    int      `yaml:"max_retries"`
}

// APIConfig is the stats query API (MIC-12, MIC-13): three listeners, each
// disabled when empty, so a gateway-trusted header is never honoured where
// anyone can reach the internal routes.
type APIConfig struct {
	// Addr serves the internal routes /api/v1/users/{user_id}/... (back
	// office, tasks); never the /me routes.
	Addr string `yaml:"addr"`
	// AppAddr serves the app routes /api/v1/users/me/... behind the
	// gateway, which sets UserHeader (and AppCodeHeader); never the
	// internal routes.
	AppAddr string `yaml:"app_addr"`
	// GRPCAddr serves hyapp.user.v1.UserService (GetUserMicLifetimeStats).
	GRPCAddr string `yaml:"grpc_addr"`
	// UserHeader carries the authenticated user id the gateway sets on the
	// app listener.
	UserHeader string `yaml:"user_header"`
	// AppCodeHeader carries the app_code the gateway sets on the app
	// listener; absent means the configured app_code.
	AppCodeHeader string `yaml:"app_code_header"`
	// TLS secures all three listeners (off by default). Its files are read
	// by the serving commands at start, not by Validate, so a config is
	// valid before its certificates are mounted.
	TLS ListenerTLSConfig `yaml:"tls"`
}

// ListenerTLSConfig is an RPC listener's TLS (lucky.tls, api.tls): with
// cert_file and key_file it serves TLS 1.2+; with client_ca_file it
// requires a client certificate that CA signed; with allowed_client_names
// a caller whose certificate carries none of the names among its DNS or
// URI SANs (SPIFFE ids) is refused (PermissionDenied, 403). The files are
// re-read when they change.
type ListenerTLSConfig struct {
	CertFile           string   `yaml:"cert_file"`
	KeyFile            string   `yaml:"key_file"`
	ClientCAFile       string   `yaml:"client_ca_file"`
	AllowedClientNames []string `yaml:"allowed_client_names"`
}

// Server is the listener TLS of internal/tlsx.
func (c ListenerTLSConfig) Server() tlsx.ServerConfig {
	return tlsx.ServerConfig{CertFile: c.CertFile, KeyFile: c.KeyFile, ClientCAFile: c.ClientCAFile,
		AllowedClientNames: append([]string(nil), c.AllowedClientNames...)}
}

// ClientTLSConfig is an outgoing gRPC connection's TLS (lucky.wallet_tls):
// TLS as soon as any key is set.
type ClientTLSConfig struct {
	// CAFile is the PEM bundle the server's certificate must chain to;
	// empty: the system roots.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are the client certificate and its key (both
	// or neither); re-read when they change.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName is the name the server's certificate is checked
	// against; empty: the dialled host.
	ServerName string `yaml:"server_name"`
}

// Enabled reports whether any key is set.
func (c ClientTLSConfig) Enabled() bool { return c != ClientTLSConfig{} }

// Files is the client TLS of internal/tlsx (certificate reloaded).
func (c ClientTLSConfig) Files() tlsx.ClientFiles {
	return tlsx.ClientFiles{CAFile: c.CAFile, CertFile: c.CertFile, KeyFile: c.KeyFile, ServerName: c.ServerName, Reload: true}
}

// OutboxWorkerConfig is IM-8's block, names unchanged. poll_interval,
// batch_size and publish_timeout <= 0 fall back to their defaults
// (IM-8: never a busy loop, never a full scan); sinks/imoutbox applies that
// rule.
//
// Enabled false switches IM delivery off as a whole: publish-im then runs
// neither the Kafka fast path nor the compensation scan (it only reports the
// backlog), so no path delivers while another is stopped.
type OutboxWorkerConfig struct {
	Enabled        bool     `yaml:"enabled"`
	PollInterval   Duration `yaml:"poll_interval"`
	BatchSize      int      `yaml:"batch_size"`
	PublishTimeout Duration `yaml:"publish_timeout"`
	RetryStrategy  string   `yaml:"retry_strategy"`
	// ClaimGrace is how old a pending row must be before the compensation
	// scan claims it, so the Kafka fast path gets it first. At least
	// im.fast_path_delay, or the scan would race room-service's own publish.
	ClaimGrace Duration `yaml:"claim_grace"`
	// LockTTL is how long a claim (status delivering) holds before another
	// worker may reclaim it.
	LockTTL Duration `yaml:"lock_ttl"`
	Group   string   `yaml:"group"`
	NodeID  string   `yaml:"node_id"`
}

// IMConfig is the Tencent Cloud IM REST client.
type IMConfig struct {
	Endpoint                     string   `yaml:"endpoint"`         // base URL; env ROOMFLOW_IM_ENDPOINT
	SDKAppID                     int64    `yaml:"sdk_app_id"`       // env ROOMFLOW_IM_SDK_APP_ID
	AdminIdentifier              string   `yaml:"admin_identifier"` // env ROOMFLOW_IM_ADMIN_IDENTIFIER
	SecretKey                    string   `yaml:"secret_key"`       // env ROOMFLOW_IM_SECRET_KEY; a secret
	GroupIDPrefix                string   `yaml:"group_id_prefix"`
	UserSigTTL                   Duration `yaml:"usersig_ttl"`
	MaxCallsPerSecond            int      `yaml:"max_calls_per_second"` // roomflow's share of Tencent's per-app limit (room-service sends too), for all publish-im replicas together: each paces at it × its fast path's owned/total partitions
	MaxMessagesPerGroupPerSecond int      `yaml:"max_messages_per_group_per_second"`
	MaxMessageBytes              int      `yaml:"max_message_bytes"`
	MarkPermanentFailed          bool     `yaml:"mark_permanent_failed"`
	// FastPathDelay is how long the fast path holds a consumed room event
	// (on its own monotonic clock, from consumption) before claiming its
	// row: room-service publishes synchronously itself and marks the row
	// delivered (IM-7), and the fast path must not race it. 0 claims at
	// once, for deployments whose room-service no longer publishes.
	FastPathDelay Duration `yaml:"fast_path_delay"`
	// ScanFallbackAfter: a publish-im replica whose fast path has been out
	// of its consumer group this long (Kafka unreachable) competes for a
	// MySQL lock, and the holder's compensation scan claims every room at
	// the full max_calls_per_second, so room_outbox alone still reaches
	// IM (IM-12). At least kafka.session_timeout; 0 switches it off.
	ScanFallbackAfter Duration `yaml:"scan_fallback_after"`
}

// LuckyConfig is `roomflow lucky`, the lucky draw service (LUCKY-*): its gRPC
// listener, wallet client, reward outbox worker, the risk caps the rule row
// does not hold, the audit key, and the start values of the run-time kill
// switches. services/luckydraw owns the checks (cmd/roomflow's wiring).
type LuckyConfig struct {
	GRPCAddr string `yaml:"grpc_addr"` // LuckyGiftService; default :13006
	// TLS secures grpc_addr: mutual TLS and the callers admitted by name
	// (room-service). Read by roomflow lucky at start, not by `roomflow
	// config`.
	TLS ListenerTLSConfig `yaml:"tls"`
	// RequireTLS refuses to start (exit 2) where the WARN would say that
	// grpc_addr is reachable from other hosts without client_ca_file.
	RequireTLS     bool   `yaml:"require_tls"`
	WalletGRPCAddr string `yaml:"wallet_grpc_addr"` // WalletService; plaintext unless wallet_tls
	// WalletTLS: TLS and a client certificate toward WalletService.
	WalletTLS           ClientTLSConfig `yaml:"wallet_tls"`
	DrawTimeout         Duration        `yaml:"draw_timeout"`          // bounds the draw transaction, lock waits included
	WalletCreditTimeout Duration        `yaml:"wallet_credit_timeout"` // bounds one CreditLuckyReward call
	OutboxBatchSize     int             `yaml:"outbox_batch_size"`
	OutboxPollInterval  Duration        `yaml:"outbox_poll_interval"`
	OutboxMaxRetries    int             `yaml:"outbox_max_retries"` // then the reward is failed (alerted, never deleted)
	OutboxLockTTL       Duration        `yaml:"outbox_lock_ttl"`    // a claimed outbox row's lease
	// OutboxFormat is where a draw's lucky events go: rows (a lucky_outbox
	// row each) or draw_events (one lucky_draw_events row per draw; only
	// once every replica runs a release that reads it).
	OutboxFormat string `yaml:"outbox_format"`
	// AuditKey is the HMAC-SHA256 key of every draw's random_digest; a
	// secret. Env: ROOMFLOW_LUCKY_AUDIT_KEY. Required by `roomflow lucky`
	// and `roomflow lucky audit`.
	AuditKey string `yaml:"audit_key"`
	// LargeTierMinReward: a tier paying at least this many coins is large
	// (large_tier_enabled=false switches it off); 0 = no tier is large.
	LargeTierMinReward int64 `yaml:"large_tier_min_reward"`
	// Risk caps the rule row does not hold; 0 = no cap. UTC windows.
	MaxDeviceDailyPayout  int64 `yaml:"max_device_daily_payout"`
	MaxAnchorDailyPayout  int64 `yaml:"max_anchor_daily_payout"`
	ActivityPeriodPayout  int64 `yaml:"activity_period_payout"`
	ActivityPeriodStartMs int64 `yaml:"activity_period_start_ms"` // [start, end): the activity window
	ActivityPeriodEndMs   int64 `yaml:"activity_period_end_ms"`
	// ReplacedVersionGrace: a draw naming a rule version still draws it
	// while the version that replaced it became effective less than this
	// ago; 0-5m, default 10s.
	ReplacedVersionGrace Duration `yaml:"replaced_version_grace"`
	// PublishPayoutBandPPM: `lucky rules publish` refuses (without
	// --force) a rule whose table's analytic payout rate is further than
	// this from its target_payout_rate_ppm. Default 100,000; 0 = off (an
	// exception to "0 means the default").
	PublishPayoutBandPPM int64 `yaml:"publish_payout_band_ppm"`
	// Switches are the kill switches' start values; `roomflow lucky switch`
	// overrides them in MySQL at run time.
	Switches LuckySwitches `yaml:"switches"`
	// Randomness (crypto | commit_reveal, default crypto) is the mode
	// stored for the days of fairness.app_codes no `roomflow lucky fairness
	// schedule` covers; draws use their stored day's mode (docs/fairness.md).
	Randomness string              `yaml:"randomness"`
	Fairness   LuckyFairnessConfig `yaml:"fairness"`
}

// LuckyFairnessConfig is the commit-reveal randomness (docs/fairness.md).
// Key and OldKeys are read by roomflow lucky at start, not by `roomflow
// config`.
type LuckyFairnessConfig struct {
	// AppCodes are the apps with a stored mode per day; empty: [app_code].
	AppCodes []string `yaml:"app_codes"`
	// Key is the AES-256-GCM key (32 bytes, base64) the days' seeds are
	// stored under; a secret, required when randomness is commit_reveal.
	// Env: ROOMFLOW_LUCKY_FAIRNESS_KEY.
	Key string `yaml:"key"`
	// OldKeys decrypt seeds stored under earlier keys (rotation).
	OldKeys []string `yaml:"old_keys"`
	// RevealGrace is how long after its day ends a seed is revealed.
	RevealGrace Duration `yaml:"reveal_grace"`
	// DayLength is a fairness day: 24h (UTC days); shorter for demos and
	// tests only.
	DayLength Duration `yaml:"day_length"`
}

// LuckySwitches are LUCKY-14's global kill switches. Booleans: an explicit
// false is honoured (they default to true).
type LuckySwitches struct {
	GlobalLuckyGiftEnabled bool `yaml:"global_lucky_gift_enabled"`
	LargeTierEnabled       bool `yaml:"large_tier_enabled"`
	WalletCreditDispatch   bool `yaml:"wallet_credit_dispatch"`
	// PilotMode (default false): only the rooms `roomflow lucky switch
	// pilot_room on --room R` lists draw.
	PilotMode bool `yaml:"pilot_mode"`
}

// PurgeConfig is `roomflow purge` (sinks/mysql/retention): how long the
// consumption tables keep their rows, and room_outbox's delivered rows.
// A window of 0 leaves its table alone. The consumption tables are the
// sink's dedupe record, so each window must be at least
// kafka.topic_retention (and what the brokers report for the topics it
// dedupes, retention.ms plus segment.ms, which purge reads at start).
type PurgeConfig struct {
	// Rows per DELETE (each its own autocommit statement).
	BatchSize int `yaml:"batch_size"`
	// BatchPause is the sleep between two batches of one table.
	BatchPause                 Duration `yaml:"batch_pause"`
	UserMicEventConsumption    Duration `yaml:"user_mic_event_consumption"`
	LuckyPoolInflowConsumption Duration `yaml:"lucky_pool_inflow_consumption"`
	LuckyEventConsumption      Duration `yaml:"lucky_event_consumption"`
	// LuckyRoomStatsHourly is how long the room-level lucky facts keep an
	// hour (a fact table: no replay bound).
	LuckyRoomStatsHourly Duration              `yaml:"lucky_room_stats_hourly"`
	RoomOutbox           PurgeRoomOutboxConfig `yaml:"room_outbox"`
}

// PurgeRoomOutboxConfig: room-service owns room_outbox, so purge deletes
// from it only when Enabled, and then only delivered rows older than Age
// that the relay has passed.
type PurgeRoomOutboxConfig struct {
	Enabled bool     `yaml:"enabled"`
	Age     Duration `yaml:"age"`
}

// Load reads path (empty: defaults only), applies environment overrides from
// getenv (nil: os.Getenv) and validates the app-wide keys; each component's
// own keys are validated by cmd/roomflow's wiring of that component.
func Load(path string, getenv func(string) string) (*Config, error) {
	cfg := Default()
	if path != "" {
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, cfgerr.Usage(fmt.Errorf("config: read %s: %w", path, err))
		}
		if err := decodeStrict(raw, &cfg); err != nil {
			return nil, cfgerr.Usage(fmt.Errorf("config file %s: %w", path, err))
		}
	}
	if getenv == nil {
		getenv = os.Getenv
	}
	if err := cfg.applyEnv(getenv); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &cfg, nil
}

// decodeStrict decodes raw into cfg, refusing unknown keys. Every mistake
// is reported at once and names its dotted key (checkKeys); a syntax error
// names its line.
func decodeStrict(raw []byte, cfg *Config) error {
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(raw)).Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // an empty file is the defaults
		}
		return err
	}
	if err := checkKeys(&doc, reflect.TypeFor[Config]()); err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil && !errors.Is(err, io.EOF) {
		return err // checkKeys missed it: the decoder's words, with its line
	}
	return nil
}

func (c *Config) applyEnv(getenv func(string) string) error {
	if v := getenv("ROOMFLOW_KAFKA_BROKERS"); v != "" {
		var bs []string
		for _, b := range strings.Split(v, ",") {
			if b = strings.TrimSpace(b); b != "" {
				bs = append(bs, b)
			}
		}
		c.Kafka.Brokers = bs
	}
	if v := getenv("ROOMFLOW_MYSQL_DSN"); v != "" {
		c.MySQL.DSN = v
	}
	if v := getenv("ROOMFLOW_RELAY_BINLOG_DSN"); v != "" {
		c.Relay.Binlog.DSN = v
	}
	if v, ok := lookup(getenv, "ROOMFLOW_METRICS_ADDR"); ok {
		c.Metrics.Addr = v
	}
	if v := getenv("ROOMFLOW_IM_ENDPOINT"); v != "" {
		c.IM.Endpoint = v
	}
	if v := getenv("ROOMFLOW_IM_SDK_APP_ID"); v != "" {
		var id int64
		if _, err := fmt.Sscan(v, &id); err != nil {
			return &cfgerr.FieldError{Key: "im.sdk_app_id", Msg: "ROOMFLOW_IM_SDK_APP_ID is not an integer"}
		}
		c.IM.SDKAppID = id
	}
	if v := getenv("ROOMFLOW_IM_ADMIN_IDENTIFIER"); v != "" {
		c.IM.AdminIdentifier = v
	}
	if v := getenv("ROOMFLOW_IM_SECRET_KEY"); v != "" {
		c.IM.SecretKey = v
	}
	if v := getenv("ROOMFLOW_KAFKA_SASL_PASSWORD"); v != "" {
		c.Kafka.loaded = &kafkaSecrets{envPassword: v}
	}
	if v := getenv("ROOMFLOW_SCHEMA_REGISTRY_PASSWORD"); v != "" {
		c.SchemaRegistry.secret = &registrySecret{env: v}
	}
	if v := getenv("ROOMFLOW_LUCKY_AUDIT_KEY"); v != "" {
		c.Lucky.AuditKey = v
	}
	if v := getenv("ROOMFLOW_LUCKY_FAIRNESS_KEY"); v != "" {
		c.Lucky.Fairness.Key = v
	}
	if v := getenv("ROOMFLOW_APP_CODE"); v != "" {
		c.AppCode = v
	}
	return nil
}

// lookup treats "-" as "set to empty" so ROOMFLOW_METRICS_ADDR=- disables the server.
func lookup(getenv func(string) string, key string) (string, bool) {
	v := getenv(key)
	if v == "" {
		return "", false
	}
	if v == "-" {
		return "", true
	}
	return v, true
}
