// Package rtconfig maps the process configuration onto the runtime options
// every roomflow processor shares, so the room and mic processors are
// wired the same way (and a later processor too).
package rtconfig

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/processors/runtime"
)

// Options are the runtime options of the processor whose Kafka client is
// named component (e.g. "room-processor"): the client from kafkax (kprom
// metrics on reg when non-nil, logs on log), a transaction every
// process.commit_interval or process.commit_records records, the group
// session kafka.session_timeout, shutdown.timeout for the final commit,
// the runtime's metrics on reg and its logs on log (nil: slog.Default()).
// Each processor adds its topics, group and punctuations.
func Options(cfg *config.Config, component string, reg prometheus.Registerer, log *slog.Logger) []runtime.Option {
	if log == nil {
		log = slog.Default()
	}
	opts := []runtime.Option{
		runtime.ClientOpts(kafkax.NewCluster(cfg.Kafka, reg, log).Opts(component)...),
		runtime.CommitInterval(cfg.Process.CommitInterval.D()),
		runtime.CommitRecords(cfg.Process.CommitRecords),
		runtime.ShutdownTimeout(cfg.Shutdown.Timeout.D()),
		runtime.Registerer(reg),
		runtime.Logger(log),
	}
	if d := cfg.Kafka.SessionTimeout.D(); d > 0 {
		opts = append(opts, runtime.SessionTimeout(d))
	}
	return opts
}
