package config

import (
	"log/slog"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyapp/roomflow/internal/kafkax"
)

// Cluster is how components reach the kafka block's cluster: brokers,
// TLS and SASL, client id prefix and group session, with their clients'
// metrics on metrics and franz-go's warnings on log (either may be nil).
//
// With kafka.tls or kafka.sasl set it needs what Validate loaded (Load
// validates): it panics on a KafkaConfig whose security was never
// validated, rather than connect without it.
func (k KafkaConfig) Cluster(metrics prometheus.Registerer, log *slog.Logger) kafkax.Cluster {
	c := kafkax.Cluster{Brokers: k.Brokers, ClientID: k.ClientID, SessionTimeout: k.SessionTimeout.D(), Metrics: metrics, Logger: log}
	if k.TLS.Enabled || k.SASL.Mechanism != "" {
		if k.loaded == nil || k.TLS.Enabled && k.loaded.tls == nil {
			panic("config: KafkaConfig.Cluster: kafka.tls or kafka.sasl is set but was not loaded by Validate")
		}
		c.TLS = k.loaded.tls
		c.SASL = kafkax.SASL{Mechanism: k.SASL.Mechanism, User: k.SASL.User, Password: k.loaded.password}
	}
	return c
}

// Layout is the design's topics as `roomflow topics` creates them.
func (k KafkaConfig) Layout() kafkax.TopicLayout {
	return kafkax.TopicLayout{Topics: k.Topics.List(), Partitions: k.Partitions, ReplicationFactor: k.ReplicationFactor}
}

// The .proto files of the public topics' values (paths under schemas/proto).
const (
	micProto         = "hyapp/user/v1/mic.proto"
	luckyInflowProto = "hyapp/activity/v1/lucky.proto"
	luckyEventsProto = "hyapp/activity/v1/lucky_events.proto"
)

// TopicLayout is Kafka.Layout with the daily totals topic's retention.ms
// set to mic.day_totals_retention: the topic is compact,delete, so a day's
// last total stays at least that long after its last change and then goes
// without a tombstone.
func (c *Config) TopicLayout() kafkax.TopicLayout {
	l := c.Kafka.Layout()
	for i, s := range l.Topics {
		if s.Key == "mic_daily_totals" {
			l.Topics[i].Configs = map[string]string{"cleanup.policy": "compact,delete",
				"retention.ms": strconv.FormatInt(c.Mic.DayTotalsRetention.D().Milliseconds(), 10)}
		}
	}
	return l
}

// List returns every topic with its key, in a stable order. It is the one
// list of the public topics too (those with a Schema): the registry, the
// framing and the data team's catalogue follow it.
func (t Topics) List() []kafkax.TopicSpec {
	return []kafkax.TopicSpec{
		{Key: "room_events", Name: t.RoomEvents, Compacted: false},
		{Key: "user_mic_events", Name: t.UserMicEvents, Compacted: false},
		{Key: "mic_ledger", Name: t.MicLedger, Compacted: false},
		{Key: "mic_session_closed", Name: t.MicSessionClosed, Compacted: false, Schema: micProto},
		{Key: "mic_daily_stats", Name: t.MicDailyStats, Compacted: false, Schema: micProto},
		{Key: "mic_lifetime_stats", Name: t.MicLifetimeStats, Compacted: false, Schema: micProto},
		{Key: "mic_daily_totals", Name: t.MicDailyTotals, Compacted: true, Schema: micProto,
			Configs: map[string]string{"cleanup.policy": "compact,delete"}},
		{Key: "mic_lifetime_totals", Name: t.MicLifetimeTotals, Compacted: true, Schema: micProto},
		{Key: "lucky_pool_inflow", Name: t.LuckyPoolInflow, Compacted: false, Schema: luckyInflowProto},
		{Key: "lucky_events", Name: t.LuckyEvents, Compacted: false, Schema: luckyEventsProto},
		{Key: "dlq", Name: t.DLQ, Compacted: false},
		// A new relay leader reads partition 0 from its start, and a
		// segment is compacted only once rolled (Kafka's defaults: at
		// 1 GiB or 7 days): small segments keep that read short.
		{Key: "relay_offsets", Name: t.RelayOffsets, Compacted: true,
			Configs: map[string]string{"segment.bytes": "16777216", "segment.ms": "3600000"}},
		{Key: "mic_state_changelog", Name: t.MicStateChangelog, Compacted: true, CoPartitionedWith: "user_mic_events"},
	}
}

// WithPrefix returns the topics with every name prefixed; tests use it to
// isolate themselves on a shared real cluster.
func (t Topics) WithPrefix(p string) Topics {
	return Topics{
		RoomEvents: p + t.RoomEvents, UserMicEvents: p + t.UserMicEvents,
		MicLedger: p + t.MicLedger, MicSessionClosed: p + t.MicSessionClosed,
		MicDailyStats: p + t.MicDailyStats, MicLifetimeStats: p + t.MicLifetimeStats,
		MicDailyTotals: p + t.MicDailyTotals, MicLifetimeTotals: p + t.MicLifetimeTotals,
		LuckyPoolInflow: p + t.LuckyPoolInflow, LuckyEvents: p + t.LuckyEvents, DLQ: p + t.DLQ,
		RelayOffsets: p + t.RelayOffsets, MicStateChangelog: p + t.MicStateChangelog,
	}
}

// Public returns the public topics: those List gives a Schema.
func (t Topics) Public() []kafkax.TopicSpec {
	var out []kafkax.TopicSpec
	for _, s := range t.List() {
		if s.Public() {
			out = append(out, s)
		}
	}
	return out
}
