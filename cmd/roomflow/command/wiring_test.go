package command

import (
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hyapp/roomflow/domain/lucky/rulestore"
	"github.com/hyapp/roomflow/internal/app"
	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/cfgerr/cfgerrtest"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/services/luckydraw"
	"github.com/hyapp/roomflow/services/luckydraw/luckyoutbox"
	"github.com/hyapp/roomflow/services/statsapi"
	mysqlsink "github.com/hyapp/roomflow/sinks/mysql"
	"github.com/hyapp/roomflow/sinks/mysql/appliers"
)

// Every command refuses a relay.* value the relay would refuse at start.
func TestRelayWiringAtLoad(t *testing.T) {
	_, err := runCLI(t, "relay:\n  max_open_gaps: 1000000\n", "config")
	if err == nil || !strings.Contains(err.Error(), "relay.max_open_gaps") {
		t.Fatalf("a relay.max_open_gaps above the limit must fail at load naming the key: %v", err)
	}
}

// processWiring runs every wiring function of `roomflow process` on cfg
// and returns their errors joined.
func processWiring(cfg config.Config) error {
	d := newDeps(&cfg, slog.New(slog.DiscardHandler))
	_, err := processSelection(d)
	_, roomErr := roomConfig(d)
	_, rulesErr := rulestore.ConfigFrom(d.Config)
	_, micErr := micConfig(d)
	return errors.Join(err, roomErr, rulesErr, micErr)
}

// The defaults pass the processors' wiring.
func TestWiringProcessDefaults(t *testing.T) {
	if err := processWiring(config.Default()); err != nil {
		t.Fatalf("defaults: %v", err)
	}
}

// Every rule of the processors' configs, each with the application key
// its error must name (the cases moved here from internal/config).
func TestWiringProcessNamesTheKey(t *testing.T) {
	cases := []struct {
		key string
		mut func(*config.Config)
	}{
		{"process.commit_interval", func(c *config.Config) { c.Process.CommitInterval = -1 }},
		// At the processors' transaction timeout (30s) the broker aborts every transaction.
		{"process.commit_interval", func(c *config.Config) { c.Process.CommitInterval = config.Duration(30 * time.Second) }},
		{"process.commit_records", func(c *config.Config) { c.Process.CommitRecords = -1 }},
		{"process.room_group", func(c *config.Config) { c.Process.RoomGroup = "" }},
		{"process.mic_group", func(c *config.Config) { c.Process.MicGroup = "" }},
		{"process.only", func(c *config.Config) { c.Process.Only = "lucky" }},
		{"process.rule_cache_size", func(c *config.Config) { c.Process.RuleCacheSize = -1 }},
		{"mic.pending_publish_max_age", func(c *config.Config) { c.Mic.PendingPublishMaxAge = -1 }},
		{"mic.publishing_session_max_age", func(c *config.Config) { c.Mic.PublishingSessionMaxAge = -1 }},
		{"mic.compensation_interval", func(c *config.Config) { c.Mic.CompensationInterval = -1 }},
		{"mic.compensation_batch_size", func(c *config.Config) { c.Mic.CompensationBatchSize = -1 }},
		{"mic.closed_session_retention", func(c *config.Config) { c.Mic.ClosedSessionRetention = -1 }},
		{"mic.day_room_retention", func(c *config.Config) { c.Mic.DayRoomRetention = -1 }},
		{"mic.day_room_retention", func(c *config.Config) { c.Mic.DayRoomRetention = config.Duration(time.Hour) }},
		{"mic.day_totals_retention", func(c *config.Config) { c.Mic.DayTotalsRetention = config.Duration(35 * time.Hour) }},
		{"kafka.topics.mic_daily_totals", func(c *config.Config) { c.Kafka.Topics.MicDailyTotals = "" }},
		{"kafka.topics.mic_lifetime_totals", func(c *config.Config) { c.Kafka.Topics.MicLifetimeTotals = "" }},
		{"shutdown.timeout", func(c *config.Config) { c.Shutdown.Timeout = -1 }},
		{"kafka.brokers", func(c *config.Config) { c.Kafka.Brokers = nil }},
		{"kafka.topics.room_events", func(c *config.Config) { c.Kafka.Topics.RoomEvents = "" }},
		{"kafka.topics.mic_state_changelog", func(c *config.Config) { c.Kafka.Topics.MicStateChangelog = "" }},
		{"kafka.topics.mic_ledger", func(c *config.Config) { c.Kafka.Topics.MicLedger = "" }},
		{"kafka.topics.lucky_pool_inflow", func(c *config.Config) { c.Kafka.Topics.LuckyPoolInflow = "" }},
		{"kafka.topics.dlq", func(c *config.Config) { c.Kafka.Topics.DLQ = "" }},
		{"app_code", func(c *config.Config) { c.AppCode = strings.Repeat("a", 33) }},
	}
	for _, tc := range cases {
		c := config.Default()
		tc.mut(&c)
		err := processWiring(c)
		cfgerrtest.NamesKey(t, tc.key, err)
	}
}

// A zero setting of the processors is their default, which equals the
// application's: a config that leaves one out (0) is not refused.
func TestWiringProcessZeroIsDefault(t *testing.T) {
	c := config.Default()
	c.Process.CommitInterval, c.Process.CommitRecords, c.Process.RuleCacheSize = 0, 0, 0
	c.Mic = config.MicConfig{CompensationEnabled: true}
	if err := processWiring(c); err != nil {
		t.Fatalf("zero settings: %v", err)
	}
}

// mic.compensation_enabled maps onto DisableCompensation; --instance-id
// onto each processor's transactional id and static member id.
func TestWiringProcessMapping(t *testing.T) {
	c := config.Default()
	c.Mic.CompensationEnabled = false
	d := newDeps(&c, slog.New(slog.DiscardHandler))
	mc, err := micConfig(d)
	if err != nil || !mc.Settings.DisableCompensation {
		t.Fatalf("mic.compensation_enabled=false: %+v %v", mc.Settings, err)
	}
	rc, err := roomConfig(d)
	if err != nil || rc.Runtime.TransactionalID != "" || rc.Runtime.InstanceID != "" {
		t.Fatalf("without --instance-id: %+v %v", rc.Runtime, err)
	}
	if err := d.Flags.Set("instance-id", "pod-1"); err != nil {
		t.Fatal(err)
	}
	rc, _ = roomConfig(d)
	mc, _ = micConfig(d)
	if rc.Runtime.Name != "room" || rc.Runtime.TransactionalID != c.Process.RoomGroup+"-pod-1" || rc.Runtime.InstanceID != "pod-1-room" {
		t.Fatalf("room with --instance-id: %+v", rc.Runtime)
	}
	if mc.Runtime.Name != "mic" || mc.Runtime.TransactionalID != c.Process.MicGroup+"-pod-1" || mc.Runtime.InstanceID != "pod-1-mic" ||
		mc.Runtime.Changelog != c.Kafka.Topics.MicStateChangelog {
		t.Fatalf("mic with --instance-id: %+v", mc.Runtime)
	}
	if mc.Runtime.Kafka.SessionTimeout != c.Kafka.SessionTimeout.D() || mc.Runtime.Registerer == nil {
		t.Fatalf("mic runtime's cluster or metrics: %+v", mc.Runtime)
	}
}

// sinkWiringDeps are the deps of `roomflow sink` on cfg, every flag at its
// default.
func sinkWiringDeps(cfg config.Config) *app.Deps {
	return newDeps(&cfg, slog.New(slog.DiscardHandler))
}

// The defaults pass the sink's wiring, and map onto what the components
// would default to themselves.
func TestWiringSinkDefaults(t *testing.T) {
	d := sinkWiringDeps(config.Default())
	c, err := sinkConfig(d)
	if err != nil {
		t.Fatalf("sinkConfig(defaults): %v", err)
	}
	if c.Parallelism != mysqlsink.DefaultParallelism || c.OwnerID != "" || c.InstanceID != "" {
		t.Fatalf("flags at their defaults: parallelism %d, owner %q, instance %q", c.Parallelism, c.OwnerID, c.InstanceID)
	}
	if _, err := appliers.StoreConfigFrom(d.Config); err != nil {
		t.Fatalf("sinkStoreConfig(defaults): %v", err)
	}
	if _, err := statsAPIConfig(d); err != nil {
		t.Fatalf("statsAPIConfig(defaults): %v", err)
	}

	// With --instance-id the member is <id>-sink and the owner id the
	// instance id.
	if err := d.Flags.Set("instance-id", "pod-1"); err != nil {
		t.Fatal(err)
	}
	if c, err := sinkConfig(d); err != nil || c.InstanceID != "pod-1-sink" || c.OwnerID != "pod-1" {
		t.Fatalf("--instance-id pod-1: %v, instance %q owner %q", err, c.InstanceID, c.OwnerID)
	}
}

// The components' own defaults equal config.Default()'s values for the
// keys they map from, so a library user gets what `roomflow sink` runs.
func TestWiringSinkComponentDefaultsMatchConfig(t *testing.T) {
	def := config.Default()
	for _, tc := range []struct {
		key       string
		got, want any
	}{
		{"sink.batch_size", mysqlsink.DefaultBatchSize, def.Sink.BatchSize},
		{"sink.flush_interval", mysqlsink.DefaultFlushInterval, def.Sink.FlushInterval.D()},
		{"sink.group", mysqlsink.DefaultGroup, def.Sink.Group},
		{"sink.max_retries", mysqlsink.DefaultMaxRetries, def.Sink.MaxRetries},
		{"kafka.topics.dlq", mysqlsink.DefaultDLQTopic, def.Kafka.Topics.DLQ},
		{"shutdown.timeout", mysqlsink.DefaultShutdownTimeout, def.Shutdown.Timeout.D()},
		{"api.user_header", statsapi.DefaultUserHeader, def.API.UserHeader},
		{"api.app_code_header", statsapi.DefaultAppCodeHeader, def.API.AppCodeHeader},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: component default %v, config.Default() %v", tc.key, tc.got, tc.want)
		}
	}
	fs := sinkWiringDeps(def).Flags
	if p, err := fs.GetInt("parallelism"); err != nil || p != mysqlsink.DefaultParallelism {
		t.Errorf("--parallelism default %d (%v), mysqlsink.DefaultParallelism %d", p, err, mysqlsink.DefaultParallelism)
	}
}

// Each bad value is reported by the wiring function under the dotted key
// (or flag) it came from. These checks lived in internal/config before.
func TestWiringSinkKeys(t *testing.T) {
	type wiring func(d *app.Deps) error
	sink := func(d *app.Deps) error { _, err := sinkConfig(d); return err }
	store := func(d *app.Deps) error { _, err := appliers.StoreConfigFrom(d.Config); return err }
	api := func(d *app.Deps) error { _, err := statsAPIConfig(d); return err }
	cases := []struct {
		key  string
		wire wiring
		mut  func(c *config.Config)
		flag [2]string
	}{
		{"sink.batch_size", sink, func(c *config.Config) { c.Sink.BatchSize = -5 }, [2]string{}},
		{"sink.flush_interval", sink, func(c *config.Config) { c.Sink.FlushInterval = -1 }, [2]string{}},
		{"sink.max_retries", sink, func(c *config.Config) { c.Sink.MaxRetries = -1 }, [2]string{}},
		{"kafka.topics.dlq", sink, func(c *config.Config) { c.Kafka.Topics.DLQ = "bad topic!" }, [2]string{}},
		{"shutdown.timeout", sink, func(c *config.Config) { c.Shutdown.Timeout = -1 }, [2]string{}},
		{"kafka.brokers", sink, func(c *config.Config) { c.Kafka.Brokers = nil }, [2]string{}},
		{"--parallelism", sink, nil, [2]string{"parallelism", "-1"}},
		{"--owner-id", sink, nil, [2]string{"owner-id", strings.Repeat("o", 129)}},
		{"app_code", store, func(c *config.Config) { c.AppCode = strings.Repeat("a", 33) }, [2]string{}},
		{"kafka.topics", store, func(c *config.Config) { c.Kafka.Topics.LuckyPoolInflow = c.Kafka.Topics.MicLedger }, [2]string{}},
		{"kafka.topics.lucky_events", store, func(c *config.Config) { c.Kafka.Topics.LuckyEvents = "bad topic!" }, [2]string{}},
		{"kafka.topics", store, func(c *config.Config) { c.Kafka.Topics.LuckyEvents = c.Kafka.Topics.LuckyPoolInflow }, [2]string{}},
		{"app_code", api, func(c *config.Config) { c.AppCode = "" }, [2]string{}},
		{"api.user_header", api, func(c *config.Config) { c.API.UserHeader = "X User" }, [2]string{}},
		{"api.app_code_header", api, func(c *config.Config) { c.API.AppCodeHeader = "X-App:Code" }, [2]string{}},
		{"api.app_code_header", api, func(c *config.Config) { c.API.AppCodeHeader = "x-user-id" }, [2]string{}},
	}
	for _, tc := range cases {
		cfg := config.Default()
		if tc.mut != nil {
			tc.mut(&cfg)
		}
		d := sinkWiringDeps(cfg)
		if tc.flag[0] != "" {
			if err := d.Flags.Set(tc.flag[0], tc.flag[1]); err != nil {
				t.Fatal(err)
			}
		}
		err := tc.wire(d)
		cfgerrtest.NamesKey(t, tc.key, err)
	}
}

// `roomflow sink` stops at start on a bad sink value, before it opens
// MySQL or Kafka, naming the key.
func TestSinkCommandRefusesBadConfig(t *testing.T) {
	// Nothing listens on the DSN's address: the command must not get that far.
	p := testenv.WriteConfig(t, "log:\n  level: error\nmetrics:\n  addr: \"\"\nsink:\n  batch_size: -5\n"+
		"mysql:\n  dsn: \"nobody@tcp("+sinkFreeAddr(t)+")/none\"\n")
	root := NewRoot()
	root.SetArgs([]string{"--config", p, "sink"})
	err := root.Execute()
	if err == nil || !strings.Contains(err.Error(), "config: sink.batch_size: ") {
		t.Fatalf("roomflow sink with sink.batch_size -5: %v, want a sink.batch_size error", err)
	}
	if strings.Contains(err.Error(), "mysql:") {
		t.Fatalf("roomflow sink opened MySQL before checking its config: %v", err)
	}
}

// imTestSecret is the IM secret key of these tests: no error may hold it.
const imTestSecret = "wiring-test-secret-key"

// With outbox_worker.enabled=false publish-im delivers nothing, so im.*
// and the fast path's keys cannot stop it; and no other command looks at
// im.* at all: a config with bad IM keys loads.
func TestIMWiringBadIMKeysStopOnlyDelivery(t *testing.T) {
	const badIM = "im:\n  endpoint: ftp://x\n  usersig_ttl: 1m\n  max_calls_per_second: -1\n  fast_path_delay: 1h\n"
	if _, err := runCLI(t, badIM, "config"); err != nil {
		t.Fatalf("a bad im.* key must not stop a command that does not deliver: %v", err)
	}
	cfg, err := config.Load(testenv.WriteConfig(t, badIM+"outbox_worker:\n  enabled: false\n"), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := imPublisherConfig(&app.Deps{Config: cfg}, ""); err != nil {
		t.Fatalf("publish-im with delivery off and bad im.* keys: %v", err)
	}
	// Its own service's settings are still checked.
	cfg.OutboxWorker.RetryStrategy = "exponential"
	if _, err := imPublisherConfig(&app.Deps{Config: cfg}, ""); !slices.Contains(cfgerr.Keys(err), "outbox_worker.retry_strategy") {
		t.Fatalf("delivery off, unknown retry strategy: %v", err)
	}
	cfg.OutboxWorker.Enabled, cfg.OutboxWorker.RetryStrategy = true, ""
	_, err = imPublisherConfig(&app.Deps{Config: cfg}, "")
	for _, key := range []string{"im.endpoint", "im.usersig_ttl", "im.max_calls_per_second", "im.fast_path_delay"} {
		if !slices.Contains(cfgerr.Keys(err), key) {
			t.Errorf("delivering: %s not named in %v", key, err)
		}
	}
}

// docs/requirements.md IM-8: outbox_worker poll_interval, batch_size and
// publish_timeout <= 0 fall back to the defaults (imoutbox applies the
// rule), so the wiring accepts them; lock_ttl is compared with the
// publish_timeout in effect.
func TestIMWiringSeed000Fallbacks(t *testing.T) {
	getenv := func(k string) string {
		return map[string]string{"ROOMFLOW_IM_SDK_APP_ID": "1400000000", "ROOMFLOW_IM_SECRET_KEY": imTestSecret}[k]
	}
	load := func(yaml string) *config.Config {
		cfg, err := config.Load(testenv.WriteConfig(t, yaml), getenv)
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
	if _, err := imPublisherConfig(&app.Deps{Config: cfg}, ""); !slices.Contains(cfgerr.Keys(err), "outbox_worker.lock_ttl") {
		t.Fatalf("lock_ttl 2s under the default publish_timeout 3s: %v", err)
	}
	// An unknown strategy loads (it is no app-wide key) and stops
	// publish-im.
	cfg = load("outbox_worker:\n  retry_strategy: exponential_backoff\n")
	if _, err := imPublisherConfig(&app.Deps{Config: cfg}, ""); !slices.Contains(cfgerr.Keys(err), "outbox_worker.retry_strategy") {
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

// TestLuckyWiringNamesTheKey: every invalid lucky.* value stops `roomflow
// lucky` with an error naming the app's key, never the audit key's value;
// the defaults with an audit key are valid and agree with each
// component's own defaults.
func TestLuckyWiringNamesTheKey(t *testing.T) {
	const key = "audit-key-never-printed"
	cases := []struct {
		key string
		mut func(*config.Config)
	}{
		{"lucky.audit_key", func(c *config.Config) { c.Lucky.AuditKey = "" }},
		{"lucky.draw_timeout", func(c *config.Config) { c.Lucky.DrawTimeout = -1 }},
		{"lucky.wallet_credit_timeout", func(c *config.Config) { c.Lucky.WalletCreditTimeout = -1 }},
		{"lucky.wallet_grpc_addr", func(c *config.Config) { c.Lucky.WalletGRPCAddr = "no-port" }},
		{"lucky.outbox_batch_size", func(c *config.Config) { c.Lucky.OutboxBatchSize = -1 }},
		{"lucky.outbox_poll_interval", func(c *config.Config) { c.Lucky.OutboxPollInterval = -1 }},
		{"lucky.outbox_max_retries", func(c *config.Config) { c.Lucky.OutboxMaxRetries = -1 }},
		{"lucky.outbox_lock_ttl", func(c *config.Config) { c.Lucky.OutboxLockTTL = config.Duration(time.Millisecond) }},
		{"lucky.outbox_format", func(c *config.Config) { c.Lucky.OutboxFormat = "row" }},
		{"lucky.max_device_daily_payout", func(c *config.Config) { c.Lucky.MaxDeviceDailyPayout = -1 }},
		{"lucky.max_anchor_daily_payout", func(c *config.Config) { c.Lucky.MaxAnchorDailyPayout = -1 }},
		{"lucky.activity_period_payout", func(c *config.Config) { c.Lucky.ActivityPeriodPayout = -1 }},
		{"lucky.activity_period_end_ms", func(c *config.Config) { c.Lucky.ActivityPeriodPayout, c.Lucky.ActivityPeriodStartMs = 10, 100 }},
		{"lucky.large_tier_min_reward", func(c *config.Config) { c.Lucky.LargeTierMinReward = -1 }},
		{"kafka.topics.lucky_events", func(c *config.Config) { c.Kafka.Topics.LuckyEvents = "" }},
	}
	for _, tc := range cases {
		cfg := config.Default()
		cfg.Lucky.AuditKey = key
		tc.mut(&cfg)
		err := CheckLucky(&app.Deps{Config: &cfg})
		cfgerrtest.NamesKey(t, tc.key, err)
		if err != nil && strings.Contains(err.Error(), key) {
			t.Errorf("%s: error holds the audit key: %v", tc.key, err)
		}
	}
	cfg := config.Default()
	cfg.Lucky.AuditKey = key
	if err := CheckLucky(&app.Deps{Config: &cfg}); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	d := &app.Deps{Config: &cfg}
	draw, _ := luckyDrawConfig(d)
	out, _ := luckyOutboxConfig(d)
	if draw.DrawTimeout != luckydraw.DefaultDrawTimeout || draw.WalletCreditTimeout != luckydraw.DefaultWalletCreditTimeout ||
		out.BatchSize != luckyoutbox.DefaultBatchSize || out.PollInterval != luckyoutbox.DefaultPollInterval ||
		out.MaxRetries != luckyoutbox.DefaultMaxRetries || out.LockTTL != luckyoutbox.DefaultLockTTL {
		t.Fatalf("lucky.* defaults disagree with the components': %+v %+v", draw, out)
	}
	// The kill switches default on; an explicit false is honoured.
	if draw.DisableGlobalLuckyGift || draw.DisableLargeTier || draw.DisableWalletCreditDispatch {
		t.Fatalf("switches must default on: %+v", draw)
	}
	cfg.Lucky.Switches.WalletCreditDispatch = false
	if draw, _ = luckyDrawConfig(d); !draw.DisableWalletCreditDispatch {
		t.Fatal("lucky.switches.wallet_credit_dispatch: false must be honoured")
	}
}

// --resnapshot is refused outside binlog mode, before anything connects.
func TestRelayResnapshotNeedsBinlogMode(t *testing.T) {
	_, err := runCLI(t, "metrics:\n  addr: \"\"\nlog:\n  level: error\n", "relay", "--resnapshot")
	if err == nil || !strings.Contains(err.Error(), "--resnapshot: only with relay.mode binlog") {
		t.Fatalf("relay --resnapshot in poll mode: %v", err)
	}
}
