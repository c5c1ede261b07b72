package main

import (
	"errors"

	"github.com/hyapp/roomflow/internal/app"
	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/kafkax"
	mysqlsink "github.com/hyapp/roomflow/sinks/mysql"
	"github.com/hyapp/roomflow/sinks/mysql/luckyinflow"
	"github.com/hyapp/roomflow/sinks/mysql/micledger"
	"github.com/hyapp/roomflow/sinks/mysql/statsapi"
)

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
		Kafka:           kafkax.NewCluster(cfg.Kafka, d.Registry, d.Log),
		Registerer:      d.Registry,
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
// ledger (kafka.topics.mic_ledger) and the lucky pool inflow
// (kafka.topics.lucky_pool_inflow). A new fact stream is one more applier
// here.
func sinkStoreConfig(d *app.Deps) (mysqlsink.StoreConfig, error) {
	cfg := d.Config
	ml := micledger.Config{Topic: cfg.Kafka.Topics.MicLedger, DefaultAppCode: cfg.AppCode}
	li := luckyinflow.Config{Topic: cfg.Kafka.Topics.LuckyPoolInflow, DefaultAppCode: cfg.AppCode}
	if err := errors.Join(
		cfgerr.Under("kafka.topics.mic_ledger", micLedgerKeys, ml.Validate()),
		cfgerr.Under("kafka.topics.lucky_pool_inflow", luckyInflowKeys, li.Validate()),
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
	c := mysqlsink.StoreConfig{
		Group:    cfg.Sink.Group,
		Appliers: []mysqlsink.Registration{mysqlsink.Register(ledger), mysqlsink.Register(inflow)},
	}
	return c, cfgerr.Under("sink", sinkStoreKeys, c.Validate())
}

// micLedgerKeys, luckyInflowKeys and sinkStoreKeys map the appliers' and
// the store's fields.
var (
	micLedgerKeys   = map[string]string{"topic": "kafka.topics.mic_ledger", "default_app_code": "app_code"}
	luckyInflowKeys = map[string]string{"topic": "kafka.topics.lucky_pool_inflow", "default_app_code": "app_code"}
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
		Registerer:     d.Registry,
		Logger:         d.Log,
	}
	return c, cfgerr.Under("api", statsAPIKeys, c.Validate())
}

// statsAPIKeys are the statsapi.Config fields that do not come from api.*.
var statsAPIKeys = map[string]string{"default_app_code": "app_code"}

// apiListeners are the configured stats API addresses.
func apiListeners(d *app.Deps) statsapi.Listeners {
	return statsapi.Listeners{Internal: d.Config.API.Addr, App: d.Config.API.AppAddr, GRPC: d.Config.API.GRPCAddr}
}
