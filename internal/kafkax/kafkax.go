// Package kafkax builds franz-go clients the way every roomflow component
// needs them (brokers, client id, Prometheus metrics via kprom, slog) and
// owns the topic layout of the design (`roomflow topics`).
package kafkax

import (
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

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

// GroupOpts are the consumer-group session options for cfg: session
// timeout kafka.session_timeout and a heartbeat every HeartbeatInterval of
// it. A zero SessionTimeout (a hand-built KafkaConfig) keeps kgo's
// defaults. Pass them before a caller's own options so those still win.
func GroupOpts(cfg config.KafkaConfig) []kgo.Opt {
	d := cfg.SessionTimeout.D()
	if d <= 0 {
		return nil
	}
	return []kgo.Opt{kgo.SessionTimeout(d), kgo.HeartbeatInterval(HeartbeatInterval(d))}
}

// HeartbeatInterval is the heartbeat for a group session of session: a
// third of it, so two heartbeats may be lost before the broker expires the
// member, but at most kgo's default 3s, so members still learn of a
// rebalance as quickly as before under long sessions.
func HeartbeatInterval(session time.Duration) time.Duration {
	return min(session/3, 3*time.Second)
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
