// The wiring: the one place the application config (internal/config,
// loaded from YAML and the environment) becomes each component's own
// Config. Every component owns its settings, defaults and Validate, keyed
// by its own field names; the functions here map the app's keys onto
// them, validate, and re-key the errors with cfgerr.Under under the dotted
// key an operator wrote ("relay.batch_size: must be > 0"). Commands call
// them at start, before they connect anywhere.

package command

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyapp/roomflow/domain/lucky/rulestore"
	"github.com/hyapp/roomflow/internal/app"
	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/tlsx"
	"github.com/hyapp/roomflow/processors/mic"
	"github.com/hyapp/roomflow/processors/mic/micproc"
	"github.com/hyapp/roomflow/processors/room"
	"github.com/hyapp/roomflow/processors/streams"
	"github.com/hyapp/roomflow/producers/relay"
	"github.com/hyapp/roomflow/services/luckydraw"
	"github.com/hyapp/roomflow/services/luckydraw/luckyoutbox"
	"github.com/hyapp/roomflow/services/luckydraw/wallet"
	"github.com/hyapp/roomflow/services/statsapi"
	"github.com/hyapp/roomflow/sinks/imoutbox"
	mysqlsink "github.com/hyapp/roomflow/sinks/mysql"
	"github.com/hyapp/roomflow/sinks/mysql/luckyinflow"
	"github.com/hyapp/roomflow/sinks/mysql/luckystats"
	"github.com/hyapp/roomflow/sinks/mysql/micledger"
	"github.com/hyapp/roomflow/sinks/mysql/rebuild"
	"github.com/hyapp/roomflow/sinks/mysql/retention"
	"github.com/hyapp/roomflow/sinks/tencentim"
)

// registerer is where a component's metrics go: d.Registry, or none
// (a nil *prometheus.Registry must not become a non-nil Registerer).
func registerer(d *app.Deps) prometheus.Registerer {
	if d.Registry == nil {
		return nil
	}
	return d.Registry
}

// checkComponents validates every component whose settings need no
// deployment secret: the relay, the processors, the sink, the stats API
// and the draw service (all but its audit key). publish-im's keys include the IM credentials, given only where it
// runs, so it checks them at its own start (imPublisherConfig). `roomflow
// config` runs it, so a bad component key is found without starting the
// component.
func checkComponents(d *app.Deps) error {
	var ch cfgerr.Checks
	add := func(_ any, err error) { ch.Add(err) }
	add(relayConfig(d, ""))
	add(roomConfig(d))
	add(ruleLoaderConfig(d))
	add(micConfig(d))
	add(sinkConfig(d))
	add(sinkStoreConfig(d))
	add(statsAPIConfig(d))
	add(purgeConfig(d, nil, func(context.Context) (uint64, bool, error) { return 0, false, nil }))
	ch.Add(checkLuckyKeys(d))
	return ch.Err()
}

// checkLuckyKeys validates roomflow lucky's keys except lucky.audit_key, a
// secret given only where the draw service (or its audit) runs, which
// checks it at its start.
func checkLuckyKeys(d *app.Deps) error {
	cfg := *d.Config
	if cfg.Lucky.AuditKey == "" {
		cfg.Lucky.AuditKey = "checked where roomflow lucky runs"
	}
	return CheckLucky(&app.Deps{Config: &cfg, Log: d.Log})
}

// checkLuckyTLS checks lucky.tls without reading its files: a config is
// valid before its certificates are mounted; roomflow lucky reads them at
// start (luckyServerTLS).
func checkLuckyTLS(d *app.Deps) error {
	return cfgerr.Under("lucky.tls", nil, d.Config.Lucky.TLS.Server().Validate())
}

// relayConfig maps relay.*, kafka.* and shutdown.timeout onto relay.Config
// and validates it, keyed by the app's dotted keys ("relay.batch_size").
// instanceID makes the replica a static member of the leader group ("":
// dynamic). d.Registry and d.Log may be nil (a check at load, before the
// process has them): no metrics, the default logger.
func relayConfig(d *app.Deps, instanceID string) (relay.Config, error) {
	cfg := d.Config
	reg := registerer(d)
	c := relay.Config{
		BatchSize:       cfg.Relay.BatchSize,
		PollInterval:    cfg.Relay.PollInterval.D(),
		GapMaxAge:       cfg.Relay.GapMaxAge.D(),
		MaxOpenGaps:     cfg.Relay.MaxOpenGaps,
		FailoverTimeout: cfg.Relay.FailoverTimeout.D(),
		TransactionalID: cfg.Relay.TransactionalID,
		MaxRecordBytes:  cfg.Relay.MaxRecordBytes,
		MaxBatchBytes:   cfg.Relay.MaxBatchBytes,
		Routes:          maps.Clone(cfg.Relay.Routes),
		Topic:           cfg.Kafka.Topics.RoomEvents,
		DLQTopic:        cfg.Kafka.Topics.DLQ,
		OffsetsTopic:    cfg.Kafka.Topics.RelayOffsets,
		ShutdownTimeout: cfg.Shutdown.Timeout.D(),
		Kafka:           cfg.Kafka.Cluster(reg, d.Log),
		Registerer:      reg,
		Logger:          d.Log,
		InstanceID:      instanceID,
		Mode:            relay.Mode(cfg.Relay.Mode),
		Binlog: relay.BinlogConfig{
			DSN:             cmp.Or(cfg.Relay.Binlog.DSN, cfg.MySQL.DSN),
			ServerID:        cfg.Relay.Binlog.ServerID,
			SnapshotFromID:  cfg.Relay.Binlog.SnapshotFromID,
			HeartbeatPeriod: cfg.Relay.Binlog.HeartbeatPeriod.D(),
		},
	}
	keys := relayKeys
	if cfg.Relay.Binlog.DSN != "" {
		keys = maps.Clone(relayKeys)
		delete(keys, "binlog.dsn") // relay.binlog.dsn itself
	}
	return c, cfgerr.Under("relay", keys, c.Validate())
}

// relayKeys are the relay.Config fields that do not come from relay.*.
var relayKeys = map[string]string{
	"topic":            "kafka.topics.room_events",
	"dlq_topic":        "kafka.topics.dlq",
	"offsets_topic":    "kafka.topics.relay_offsets",
	"shutdown_timeout": "shutdown.timeout",
	"kafka.brokers":    "kafka.brokers",
	"binlog.dsn":       "mysql.dsn",
}

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
func processRuntime(d *app.Deps, name, group, input string) streams.Config {
	cfg := d.Config
	reg := registerer(d)
	c := streams.Config{
		Name:            name,
		Input:           input,
		Group:           group,
		DLQ:             cfg.Kafka.Topics.DLQ,
		CommitInterval:  cfg.Process.CommitInterval.D(),
		CommitRecords:   cfg.Process.CommitRecords,
		ShutdownTimeout: cfg.Shutdown.Timeout.D(),
		Kafka:           cfg.Kafka.Cluster(reg, d.Log),
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
// fields) plus its streams.Config's keys (under "runtime.") mapped onto
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
// rule loader (rulestore.Config) and validates it.
func ruleLoaderConfig(d *app.Deps) (rulestore.Config, error) {
	c := rulestore.Config{CacheSize: d.Config.Process.RuleCacheSize}
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

// sinkConfig maps sink.*, kafka.* (the cluster, topics.dlq),
// shutdown.timeout and the command's --owner-id (default --instance-id),
// --parallelism and --instance-id onto mysqlsink.Config and validates it,
// keyed by the app's dotted keys (a flag by its name).
func sinkConfig(d *app.Deps) (mysqlsink.Config, error) {
	cfg := d.Config
	ownerID := d.Flag("owner-id")
	if ownerID == "" {
		ownerID = d.Flag("instance-id")
	}
	parallelism, err := d.Flags.GetInt("parallelism")
	if err != nil {
		return mysqlsink.Config{}, err
	}
	c := mysqlsink.Config{
		BatchSize:       cfg.Sink.BatchSize,
		FlushInterval:   cfg.Sink.FlushInterval.D(),
		Group:           cfg.Sink.Group,
		MaxRetries:      cfg.Sink.MaxRetries,
		DLQTopic:        cfg.Kafka.Topics.DLQ,
		ShutdownTimeout: cfg.Shutdown.Timeout.D(),
		Kafka:           cfg.Kafka.Cluster(registerer(d), d.Log),
		Registerer:      registerer(d),
		Logger:          d.Log,
		Health:          d.Health,
		OwnerID:         ownerID,
		InstanceID:      memberID(d, "sink"),
		Parallelism:     parallelism,
	}
	return c, cfgerr.Under("sink", sinkKeys, c.Validate())
}

// sinkKeys are the mysqlsink.Config fields that do not come from sink.*.
var sinkKeys = map[string]string{
	"dlq_topic":        "kafka.topics.dlq",
	"shutdown_timeout": "shutdown.timeout",
	"kafka.brokers":    "kafka.brokers",
	"owner_id":         "--owner-id",
	"parallelism":      "--parallelism",
}

// sinkStoreConfig maps sink.group, app_code and the fact topics onto the
// sink store's config: its group and one applier per fact topic, the mic
// ledger (kafka.topics.mic_ledger), the lucky pool inflow
// (kafka.topics.lucky_pool_inflow) and the lucky events
// (kafka.topics.lucky_events, payout stats). A new fact stream is one more
// applier here.
func sinkStoreConfig(d *app.Deps) (mysqlsink.StoreConfig, error) {
	cfg := d.Config
	ml := micledger.Config{Topic: cfg.Kafka.Topics.MicLedger, DefaultAppCode: cfg.AppCode}
	li := luckyinflow.Config{Topic: cfg.Kafka.Topics.LuckyPoolInflow, DefaultAppCode: cfg.AppCode}
	ls := luckystats.Config{Topic: cfg.Kafka.Topics.LuckyEvents, DefaultAppCode: cfg.AppCode}
	if err := errors.Join(
		cfgerr.Under("kafka.topics.mic_ledger", micLedgerKeys, ml.Validate()),
		cfgerr.Under("kafka.topics.lucky_pool_inflow", luckyInflowKeys, li.Validate()),
		cfgerr.Under("kafka.topics.lucky_events", luckyEventsKeys, ls.Validate()),
	); err != nil {
		return mysqlsink.StoreConfig{}, err
	}
	ledger, err := micledger.New(ml)
	if err != nil {
		return mysqlsink.StoreConfig{}, cfgerr.Under("kafka.topics.mic_ledger", micLedgerKeys, err)
	}
	inflow, err := luckyinflow.New(li)
	if err != nil {
		return mysqlsink.StoreConfig{}, cfgerr.Under("kafka.topics.lucky_pool_inflow", luckyInflowKeys, err)
	}
	stats, err := luckystats.New(ls)
	if err != nil {
		return mysqlsink.StoreConfig{}, cfgerr.Under("kafka.topics.lucky_events", luckyEventsKeys, err)
	}
	c := mysqlsink.StoreConfig{
		Group:    cfg.Sink.Group,
		Appliers: []mysqlsink.Registration{mysqlsink.Register(ledger), mysqlsink.Register(inflow), mysqlsink.Register(stats)},
	}
	return c, cfgerr.Under("sink", sinkStoreKeys, c.Validate())
}

// micLedgerKeys, luckyInflowKeys, luckyEventsKeys and sinkStoreKeys map
// the appliers' and the store's fields.
var (
	micLedgerKeys   = map[string]string{"topic": "kafka.topics.mic_ledger", "default_app_code": "app_code"}
	luckyInflowKeys = map[string]string{"topic": "kafka.topics.lucky_pool_inflow", "default_app_code": "app_code"}
	luckyEventsKeys = map[string]string{"topic": "kafka.topics.lucky_events", "default_app_code": "app_code"}
	sinkStoreKeys   = map[string]string{"appliers": "kafka.topics"}
)

// statsAPIConfig maps app_code and the api.* headers onto statsapi.Config
// and validates it. The api.* listener addresses are app-wide keys
// (internal/config checks them); apiListeners maps them.
func statsAPIConfig(d *app.Deps) (statsapi.Config, error) {
	cfg := d.Config
	c := statsapi.Config{
		DefaultAppCode: cfg.AppCode,
		QueryTimeout:   statsapi.DefaultQueryTimeout, // no key of its own
		UserHeader:     cfg.API.UserHeader,
		AppCodeHeader:  cfg.API.AppCodeHeader,
		Registerer:     registerer(d),
		Logger:         d.Log,
	}
	return c, cfgerr.Under("api", statsAPIKeys, c.Validate())
}

// statsAPIKeys are the statsapi.Config fields that do not come from api.*.
var statsAPIKeys = map[string]string{"default_app_code": "app_code"}

// apiTLS reads api.tls's files (nil when unset: plaintext), where a
// command starts serving the stats API, not in `roomflow config`: errors
// keyed api.tls.* (exit 2).
func apiTLS(d *app.Deps) (*tlsx.Server, error) {
	srv, err := d.Config.API.TLS.Server().Load(d.Log.With("component", "api"))
	return srv, cfgerr.Under("api.tls", nil, err)
}

// apiListeners are the configured stats API addresses.
func apiListeners(d *app.Deps) statsapi.Listeners {
	return statsapi.Listeners{Internal: d.Config.API.Addr, App: d.Config.API.AppAddr, GRPC: d.Config.API.GRPCAddr}
}

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
	reg := registerer(d)
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
		Kafka:         cfg.Kafka.Cluster(reg, d.Log),
		InstanceID:    instanceID,
		// 0 switches the fallback off (in imoutbox 0 is the default).
		ScanFallbackAfter:   im.ScanFallbackAfter.D(),
		DisableScanFallback: im.ScanFallbackAfter == 0,
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
		"scan_fallback_after":   "im.scan_fallback_after",
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

// luckyDrawConfig maps lucky.* and app_code onto luckydraw.Config and
// validates it, keyed lucky.<field> ("lucky.audit_key"). The kill
// switches are booleans that default to true, so they map negated (as
// outbox_worker.enabled): an explicit false is honoured.
func luckyDrawConfig(d *app.Deps) (luckydraw.Config, error) {
	l := d.Config.Lucky
	c := luckydraw.Config{
		AppCode:                     d.Config.AppCode,
		DrawTimeout:                 l.DrawTimeout.D(),
		WalletCreditTimeout:         l.WalletCreditTimeout.D(),
		AuditKey:                    l.AuditKey,
		LargeTierMinReward:          l.LargeTierMinReward,
		MaxDeviceDailyPayout:        l.MaxDeviceDailyPayout,
		MaxAnchorDailyPayout:        l.MaxAnchorDailyPayout,
		ActivityPeriodPayout:        l.ActivityPeriodPayout,
		ActivityPeriodStartMs:       l.ActivityPeriodStartMs,
		ActivityPeriodEndMs:         l.ActivityPeriodEndMs,
		DisableGlobalLuckyGift:      !l.Switches.GlobalLuckyGiftEnabled,
		DisableLargeTier:            !l.Switches.LargeTierEnabled,
		DisableWalletCreditDispatch: !l.Switches.WalletCreditDispatch,
		PilotMode:                   l.Switches.PilotMode,
		ReplacedVersionGrace:        l.ReplacedVersionGrace.D(),
		Registerer:                  registerer(d),
		Logger:                      d.Log,
	}
	return c, cfgerr.Under("lucky", luckyDrawKeys, c.Validate())
}

// luckyDrawKeys are the luckydraw.Config fields that are not lucky.<field>.
var luckyDrawKeys = map[string]string{"app_code": "app_code"}

// luckyOutboxConfig maps lucky.outbox_*, lucky.wallet_credit_timeout,
// kafka.* and app_code onto the lucky_outbox worker's Config and
// validates it. dispatch reads the wallet_credit_dispatch switch (the
// draw service's).
func luckyOutboxConfig(d *app.Deps, workerID string, dispatch func(context.Context, string) (bool, error)) (luckyoutbox.Config, error) {
	cfg := d.Config
	l := cfg.Lucky
	c := luckyoutbox.Config{
		AppCode:             cfg.AppCode,
		BatchSize:           l.OutboxBatchSize,
		PollInterval:        l.OutboxPollInterval.D(),
		MaxRetries:          l.OutboxMaxRetries,
		LockTTL:             l.OutboxLockTTL.D(),
		WalletCreditTimeout: l.WalletCreditTimeout.D(),
		WorkerID:            workerID,
		Topic:               cfg.Kafka.Topics.LuckyEvents,
		Kafka:               cfg.Kafka.Cluster(registerer(d), d.Log),
		DispatchEnabled:     dispatch,
		Registerer:          registerer(d),
		Logger:              d.Log,
	}
	return c, cfgerr.Under("lucky", luckyOutboxKeys, c.Validate())
}

// luckyOutboxKeys are the luckyoutbox.Config fields that are not
// lucky.outbox_<field>.
var luckyOutboxKeys = map[string]string{
	"app_code":              "app_code",
	"wallet_credit_timeout": "lucky.wallet_credit_timeout",
	"topic":                 "kafka.topics.lucky_events",
	"kafka.brokers":         "kafka.brokers",
	"batch_size":            "lucky.outbox_batch_size",
	"poll_interval":         "lucky.outbox_poll_interval",
	"max_retries":           "lucky.outbox_max_retries",
	"lock_ttl":              "lucky.outbox_lock_ttl",
}

// luckyWalletConfig is the wallet client of lucky.wallet_grpc_addr. It
// checks lucky.wallet_tls without reading its files (luckyWalletTLS reads
// them where roomflow lucky starts).
func luckyWalletConfig(d *app.Deps) (wallet.Config, error) {
	l := d.Config.Lucky
	c := wallet.Config{Addr: l.WalletGRPCAddr, Timeout: l.WalletCreditTimeout.D()}
	return c, errors.Join(
		cfgerr.Under("lucky", map[string]string{"addr": "lucky.wallet_grpc_addr", "timeout": "lucky.wallet_credit_timeout"}, c.Validate()),
		cfgerr.Under("lucky.wallet_tls", nil, l.WalletTLS.Files().Validate()))
}

// luckyWalletTLS reads lucky.wallet_tls: nil when unset (plaintext), else
// the client config (errors keyed lucky.wallet_tls.*).
func luckyWalletTLS(d *app.Deps) (*tls.Config, error) {
	w := d.Config.Lucky.WalletTLS
	if !w.Enabled() {
		return nil, nil
	}
	f := w.Files()
	f.Logger = d.Log.With("component", "lucky")
	tc, err := f.Load()
	return tc, cfgerr.Under("lucky.wallet_tls", nil, err)
}

// luckyServerTLS reads lucky.tls (nil when unset: plaintext) and applies
// lucky.require_tls: a lucky.grpc_addr other hosts reach without
// lucky.tls.client_ca_file is refused with it, warned about without it
// (the WARN and roomflow_rpc_insecure come from the listener's guard).
// Errors name the key; they are usage errors (exit 2).
func luckyServerTLS(d *app.Deps) (*tlsx.Server, error) {
	l := d.Config.Lucky
	if l.RequireTLS && tlsx.Insecure(l.GRPCAddr, l.TLS.Server()) {
		return nil, &cfgerr.FieldError{Key: "lucky.require_tls", Msg: fmt.Sprintf(
			"is true but lucky.grpc_addr %q accepts callers from other hosts without a client certificate: set lucky.tls.cert_file, lucky.tls.key_file and lucky.tls.client_ca_file (and lucky.tls.allowed_client_names), or listen on loopback",
			l.GRPCAddr)}
	}
	srv, err := l.TLS.Server().Load(d.Log.With("component", "lucky"))
	return srv, cfgerr.Under("lucky.tls", nil, err)
}

// purgeConfig maps purge.* onto retention.Config and validates it, keyed
// purge.<field> ("purge.user_mic_event_consumption"). Each consumption
// table's Replay is the longest retention of the topics it dedupes
// (purgeTopics): kafka.topic_retention, or longer where replay (how long
// the brokers may keep each topic's records, as purge reads it at start) says
// so; a topic kept forever (<= 0) makes every window of its tables too
// short. relayedBelow is the relay's bound for room_outbox.
func purgeConfig(d *app.Deps, replay map[string]time.Duration, relayedBelow func(context.Context) (uint64, bool, error)) (retention.Config, error) {
	cfg := d.Config
	p := cfg.Purge
	topics := purgeTopics(cfg.Kafka.Topics)
	window := func(table string, age config.Duration) retention.Window {
		r := cfg.Kafka.TopicRetention.D()
		for _, t := range topics[table] {
			if got, ok := replay[t]; ok && r > 0 && (got <= 0 || got > r) {
				r = got
			}
		}
		return retention.Window{Age: age.D(), Replay: r}
	}
	c := retention.Config{
		UserMicEventConsumption:    window(retention.UserMicEventConsumption, p.UserMicEventConsumption),
		LuckyPoolInflowConsumption: window(retention.LuckyPoolInflowConsumption, p.LuckyPoolInflowConsumption),
		LuckyEventConsumption:      window(retention.LuckyEventConsumption, p.LuckyEventConsumption),
		LuckyRoomStatsHourly:       p.LuckyRoomStatsHourly.D(),
		RoomOutbox:                 retention.RoomOutboxConfig{Enabled: p.RoomOutbox.Enabled, Age: p.RoomOutbox.Age.D()},
		RelayedBelow:               relayedBelow,
		BatchSize:                  p.BatchSize,
		BatchPause:                 p.BatchPause.D(),
		Registerer:                 registerer(d),
		Logger:                     d.Log,
	}
	return c, cfgerr.Under("purge", purgeKeys, c.Validate())
}

// purgeKeys are the retention.Config fields that are not purge.<field>.
var purgeKeys = map[string]string{"relayed_below": "purge.room_outbox.enabled"}

// purgeTopics lists, per consumption table, the topics whose replay
// reaches it: the sink's input topic and the topics upstream of it whose
// reprocessing reproduces its event ids.
func purgeTopics(t config.Topics) map[string][]string {
	return map[string][]string{
		retention.UserMicEventConsumption:    {t.MicLedger, t.UserMicEvents, t.RoomEvents},
		retention.LuckyPoolInflowConsumption: {t.LuckyPoolInflow, t.RoomEvents},
		retention.LuckyEventConsumption:      {t.LuckyEvents},
	}
}

// rebuildConfig maps sink.group, app_code, kafka.* (the cluster, the mic
// ledger and, with pools, the lucky pool inflow topic) and rebuild's
// --batch-size and --idle onto rebuild.Config and validates it.
func rebuildConfig(d *app.Deps, pools bool, batchSize int, idle time.Duration) (rebuild.Config, error) {
	cfg := d.Config
	c := rebuild.Config{
		Group:          cfg.Sink.Group,
		LedgerTopic:    cfg.Kafka.Topics.MicLedger,
		DefaultAppCode: cfg.AppCode,
		BatchSize:      batchSize,
		Idle:           idle,
		Kafka:          cfg.Kafka.Cluster(nil, d.Log),
		Logger:         d.Log,
	}
	if pools {
		c.InflowTopic = cfg.Kafka.Topics.LuckyPoolInflow
	}
	return c, cfgerr.Under("rebuild", rebuildKeys, c.Validate())
}

// rebuildKeys map every rebuild.Config field: none is a rebuild.* key.
var rebuildKeys = map[string]string{
	"group":            "sink.group",
	"ledger_topic":     "kafka.topics.mic_ledger",
	"inflow_topic":     "kafka.topics.lucky_pool_inflow",
	"default_app_code": "app_code",
	"batch_size":       "--batch-size",
	"idle":             "--idle",
	"kafka.brokers":    "kafka.brokers",
	"binlog.dsn":       "mysql.dsn",
}
