// Package appliers is the set of fact streams the MySQL sink applies: one
// applier per fact topic, the mic ledger (kafka.topics.mic_ledger,
// micledger), the lucky pool inflow (kafka.topics.lucky_pool_inflow,
// luckyinflow) and the lucky events (kafka.topics.lucky_events, the
// payout and room stats: luckystats). A new fact stream is one more
// applier here.
package appliers

import (
	"errors"

	"github.com/hyapp/roomflow/internal/config"
	mysqlsink "github.com/hyapp/roomflow/sinks/mysql"
	"github.com/hyapp/roomflow/sinks/mysql/luckyinflow"
	"github.com/hyapp/roomflow/sinks/mysql/luckystats"
	"github.com/hyapp/roomflow/sinks/mysql/micledger"
)

// StoreConfigFrom is the sink store of sink.group with every applier on
// its topic of app, app_code their default app_code, validated, errors
// keyed by the application's keys.
func StoreConfigFrom(app *config.Config) (mysqlsink.StoreConfig, error) {
	t := app.Kafka.Topics
	ml, err1 := mysqlsink.ApplierConfigFrom(app, "kafka.topics.mic_ledger", t.MicLedger)
	li, err2 := mysqlsink.ApplierConfigFrom(app, "kafka.topics.lucky_pool_inflow", t.LuckyPoolInflow)
	ls, err3 := mysqlsink.ApplierConfigFrom(app, "kafka.topics.lucky_events", t.LuckyEvents)
	if err := errors.Join(err1, err2, err3); err != nil {
		return mysqlsink.StoreConfig{}, err
	}
	ledger, err1 := micledger.New(ml)
	inflow, err2 := luckyinflow.New(li)
	stats, err3 := luckystats.New(ls)
	if err := errors.Join(err1, err2, err3); err != nil {
		return mysqlsink.StoreConfig{}, err
	}
	return mysqlsink.StoreConfigFrom(app, mysqlsink.Register(ledger), mysqlsink.Register(inflow), mysqlsink.Register(stats))
}
