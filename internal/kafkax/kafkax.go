// Package kafkax builds franz-go clients the way every roomflow component
// needs them (brokers, client id, Prometheus metrics via kprom, slog) and
// owns the topic layout of the design (`roomflow topics`).
package kafkax

import (
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"

	"github.com/hyapp/roomflow/internal/config"
)

var (
	metricsMu sync.Mutex
	metrics   = map[*prometheus.Registry]*kprom.Metrics{}
)

// clientMetrics returns one kprom plugin per registry: kprom registers its
// collectors once and is shared by every client of the process.
func clientMetrics(reg *prometheus.Registry) *kprom.Metrics {
	metricsMu.Lock()
	defer metricsMu.Unlock()
	if m, ok := metrics[reg]; ok {
		return m
	}
	m := kprom.NewMetrics("roomflow_kafka", kprom.Registerer(reg), kprom.Gatherer(reg))
	metrics[reg] = m
	return m
}

// Opts returns the base options for a client of component: seed brokers,
// client id "<client_id>-<component>", kprom hooks on reg (when non-nil),
// and franz-go logs at warn and above through log.
func Opts(cfg config.KafkaConfig, component string, reg *prometheus.Registry, log *slog.Logger) []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID(cfg.ClientID + "-" + component),
	}
	if reg != nil {
		opts = append(opts, kgo.WithHooks(clientMetrics(reg)))
	}
	if log != nil {
		opts = append(opts, kgo.WithLogger(kslog{log.With("component", component)}))
	}
	return opts
}

// NewClient is kgo.NewClient over Opts plus extra.
func NewClient(cfg config.KafkaConfig, component string, reg *prometheus.Registry, log *slog.Logger, extra ...kgo.Opt) (*kgo.Client, error) {
	return kgo.NewClient(append(Opts(cfg, component, reg, log), extra...)...)
}

// kslog adapts slog to kgo.Logger at warn and above (franz-go's info is chatty).
type kslog struct{ l *slog.Logger }

func (k kslog) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (k kslog) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	switch level {
	case kgo.LogLevelError:
		k.l.Error(msg, keyvals...)
	case kgo.LogLevelWarn:
		k.l.Warn(msg, keyvals...)
	default:
		k.l.Debug(msg, keyvals...)
	}
}
