// Package kafkax builds franz-go clients the way every roomflow component
// needs them (brokers, TLS and SASL, client id, Prometheus metrics via
// kprom, slog) and owns the topic layout of the design (`roomflow topics`).
package kafkax

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"

	"github.com/hyapp/roomflow/internal/cfgerr"
)

// clientSeq numbers the clients of this process: kprom registers one set of
// collectors per client, labelled by client id, so ids must be unique.
var clientSeq atomic.Int64

// Cluster is how a component reaches Kafka: the seed brokers, how it
// secures and authenticates its connections, the client id prefix, the
// consumer-group session, and where its clients' metrics and franz-go logs
// go. Components take one in their Config and build every
// client of theirs from it, each under its own component name, so client
// ids stay unique and kprom's collectors never clash.
type Cluster struct {
	Brokers []string
	// TLS, when non-nil, dials every broker over TLS with it (see
	// TLSFiles.Load); nil dials plaintext.
	TLS *tls.Config
	// SASL logs every connection in; the zero value does not.
	SASL SASL
	// ClientID prefixes every client id ("<ClientID>-<component>-<n>");
	// empty means "roomflow".
	ClientID string
	// SessionTimeout is the consumer-group session; 0 keeps kgo's default.
	SessionTimeout time.Duration
	// Metrics, when non-nil, gets kprom's roomflow_kafka_* series of every
	// client, labelled by client id (unregistered when the client closes).
	Metrics prometheus.Registerer
	// Logger, when non-nil, gets franz-go's warnings with component=<name>
	// added: pass a logger that has no component field yet.
	Logger *slog.Logger
	// Extra is appended to every client's options (tests: hooks, retries).
	Extra []kgo.Opt
}

// Validate names the cluster's own fields (brokers, sasl.mechanism,
// sasl.user, sasl.password), never with the password's value.
func (c Cluster) Validate() error {
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, &cfgerr.FieldError{Key: "brokers", Msg: "must list at least one broker"})
	}
	errs = append(errs, cfgerr.Under("sasl", nil, c.SASL.Validate()))
	return errors.Join(errs...)
}

// Opts returns the base options of a client of component: seed brokers,
// TLS and SASL, a unique client id, MetadataRefreshMin, kprom metrics and
// franz-go logs (see Cluster), then Extra.
func (c Cluster) Opts(component string) []kgo.Opt {
	prefix := c.ClientID
	if prefix == "" {
		prefix = "roomflow"
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(c.Brokers...),
		kgo.ClientID(fmt.Sprintf("%s-%s-%d", prefix, component, clientSeq.Add(1))),
		kgo.MetadataMinAge(MetadataRefreshMin),
	}
	if c.TLS != nil {
		opts = append(opts, kgo.DialTLSConfig(c.TLS))
	}
	if m := c.SASL.mechanism(); m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	if c.Metrics != nil {
		opts = append(opts, kgo.WithHooks(kprom.NewMetrics("roomflow_kafka", kprom.Registerer(c.Metrics), kprom.WithClientLabel())))
	}
	if l := c.logger(component); l != nil {
		opts = append(opts, kgo.WithLogger(l))
	}
	return append(opts, c.Extra...)
}

// logger is franz-go's logger for component's clients: Logger's warnings
// with component=<name>; nil without Logger.
func (c Cluster) logger(component string) kgo.Logger {
	if c.Logger == nil {
		return nil
	}
	return kslog{c.Logger.With("component", component)}
}

// GroupOpts are the consumer-group session options: SessionTimeout and a
// heartbeat every HeartbeatInterval of it. A zero SessionTimeout keeps
// kgo's defaults. Pass them before a caller's own options so those still
// win.
func (c Cluster) GroupOpts() []kgo.Opt {
	if c.SessionTimeout <= 0 {
		return nil
	}
	return []kgo.Opt{kgo.SessionTimeout(c.SessionTimeout), kgo.HeartbeatInterval(HeartbeatInterval(c.SessionTimeout))}
}

// HeartbeatInterval is the heartbeat for a group session of session: a
// third of it, so two heartbeats may be lost before the broker expires the
// member, but at most kgo's default 3s, so members still learn of a
// rebalance as quickly as before under long sessions.
func HeartbeatInterval(session time.Duration) time.Duration {
	return min(session/3, 3*time.Second)
}

// NewClient is kgo.NewClient over Opts(component) plus extra.
func (c Cluster) NewClient(component string, extra ...kgo.Opt) (*kgo.Client, error) {
	return kgo.NewClient(append(c.Opts(component), extra...)...)
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

// MaxClientIDPrefix bounds Cluster.ClientID: kgo refuses a client id over
// 256 bytes (kgo.NewClient fails), and Opts appends "-<component>-<n>" to
// it (the restore reader adds "-restore"), at most 42 bytes today; 64 are
// kept for them.
const MaxClientIDPrefix = 256 - 64

// MaxTransactionTimeout is the brokers' default transaction.max.timeout.ms:
// InitProducerID refuses a longer transaction timeout with
// INVALID_TRANSACTION_TIMEOUT, so no transaction of that producer starts.
const MaxTransactionTimeout = 15 * time.Minute

// MetadataRefreshMin is the least time between two metadata refreshes of a
// client (kgo.MetadataMinAge; kgo's default is 5s). A produce or fetch
// answered NOT_LEADER or NOT_ENOUGH_REPLICAS waits for a refresh before it
// is retried, so kgo's default held a transaction's produce up to 5 s per
// such answer, and two could outlast the relay's transaction timeout
// (issue 10, chaos finding 2). Refreshes still happen only on errors and
// every metadata max age (5m).
const MetadataRefreshMin = 250 * time.Millisecond

// MessageBytes is the largest record roomflow writes by default: the
// relay's relay.max_record_bytes default, within Kafka's default
// message.max.bytes (1,048,588).
const MessageBytes = 1 << 20

// BatchBytes lets a producer write records of up to maxRecord bytes, and
// at least MessageBytes: kgo's default batch bound (1,000,012) is below
// what the relay writes, so its records could be neither forwarded,
// dead-lettered nor re-driven.
func BatchBytes(maxRecord int) kgo.Opt {
	return kgo.ProducerBatchMaxBytes(int32(max(maxRecord, MessageBytes)))
}
