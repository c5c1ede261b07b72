// Package kafkax builds franz-go clients the way every roomflow component
// needs them (brokers, client id, Prometheus metrics via kprom, slog) and
// owns the topic layout of the design (`roomflow topics`).
package kafkax

import (
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"

	"github.com/hyapp/roomflow/internal/config"
)

// clientSeq numbers the clients of this process: kprom registers one set of
// collectors per client, labelled by client id, so ids must be unique.
var clientSeq atomic.Int64

// Opts returns the base options for a client of component: seed brokers,
// client id "<client_id>-<component>-<n>", kprom metrics roomflow_kafka_*
// labelled with that client id on reg (when non-nil; unregistered when the
// client closes), and franz-go logs at warn and above through log with
// component=<component> added: pass a logger that has no component field
// yet, or the lines carry two.
func Opts(cfg config.KafkaConfig, component string, reg prometheus.Registerer, log *slog.Logger) []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID(fmt.Sprintf("%s-%s-%d", cfg.ClientID, component, clientSeq.Add(1))),
	}
	if reg != nil {
		opts = append(opts, kgo.WithHooks(kprom.NewMetrics("roomflow_kafka", kprom.Registerer(reg), kprom.WithClientLabel())))
	}
	if log != nil {
		opts = append(opts, kgo.WithLogger(kslog{log.With("component", component)}))
	}
	return opts
}

// NewClient is kgo.NewClient over Opts plus extra.
func NewClient(cfg config.KafkaConfig, component string, reg prometheus.Registerer, log *slog.Logger, extra ...kgo.Opt) (*kgo.Client, error) {
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
