package luckyoutbox

import (
	"crypto/rand"
	"fmt"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/config"
)

// ConfigFrom maps lucky.outbox_*, lucky.wallet_credit_timeout, kafka.*
// and app_code onto Config and validates it, errors keyed by the
// application's keys. own carries what no key gives: WorkerID,
// DispatchEnabled (the draw service's wallet_credit_dispatch switch),
// Registerer and Logger (the Kafka cluster reports to them).
func ConfigFrom(app *config.Config, own Config) (Config, error) {
	l := app.Lucky
	c := Config{
		AppCode:             app.AppCode,
		BatchSize:           l.OutboxBatchSize,
		PollInterval:        l.OutboxPollInterval.D(),
		MaxRetries:          l.OutboxMaxRetries,
		LockTTL:             l.OutboxLockTTL.D(),
		WalletCreditTimeout: l.WalletCreditTimeout.D(),
		WorkerID:            own.WorkerID,
		Topic:               app.Kafka.Topics.LuckyEvents,
		Kafka:               app.Kafka.Cluster(own.Registerer, own.Logger),
		DispatchEnabled:     own.DispatchEnabled,
		Registerer:          own.Registerer,
		Logger:              own.Logger,
	}
	return c, cfgerr.Under("lucky", appKeys, c.Validate())
}

// appKeys are the Config fields that are not lucky.outbox_<field>.
var appKeys = map[string]string{
	"app_code":              "app_code",
	"wallet_credit_timeout": "lucky.wallet_credit_timeout",
	"topic":                 "kafka.topics.lucky_events",
	"kafka.brokers":         "kafka.brokers",
	"batch_size":            "lucky.outbox_batch_size",
	"poll_interval":         "lucky.outbox_poll_interval",
	"max_retries":           "lucky.outbox_max_retries",
	"lock_ttl":              "lucky.outbox_lock_ttl",
}

// WorkerID is a worker id for the replica named instance: the name plus a
// random suffix, at most 64 bytes. It names this process, not the pod: a
// restarted process (same instance) must not take the rows its previous
// incarnation claimed for its own before their lease ends.
func WorkerID(instance string) string {
	var b [4]byte
	rand.Read(b[:]) //nolint:errcheck // crypto/rand never fails on Linux
	return fmt.Sprintf("%.55s-%x", instance, b)
}
