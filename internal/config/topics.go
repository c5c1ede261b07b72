package config

// TopicSpec is one topic of the design and whether it is an internal,
// compacted state topic.
type TopicSpec struct {
	Key       string // YAML key under kafka.topics
	Name      string
	Compacted bool
}

// List returns every topic with its key, in a stable order.
func (t Topics) List() []TopicSpec {
	return []TopicSpec{
		{"room_events", t.RoomEvents, false},
		{"user_mic_events", t.UserMicEvents, false},
		{"mic_ledger", t.MicLedger, false},
		{"mic_session_closed", t.MicSessionClosed, false},
		{"mic_daily_stats", t.MicDailyStats, false},
		{"mic_lifetime_stats", t.MicLifetimeStats, false},
		{"lucky_pool_inflow", t.LuckyPoolInflow, false},
		{"dlq", t.DLQ, false},
		{"relay_offsets", t.RelayOffsets, true},
		{"mic_state_changelog", t.MicStateChangelog, true},
	}
}

// WithPrefix returns the topics with every name prefixed; tests use it to
// isolate themselves on a shared real cluster.
func (t Topics) WithPrefix(p string) Topics {
	return Topics{
		RoomEvents: p + t.RoomEvents, UserMicEvents: p + t.UserMicEvents,
		MicLedger: p + t.MicLedger, MicSessionClosed: p + t.MicSessionClosed,
		MicDailyStats: p + t.MicDailyStats, MicLifetimeStats: p + t.MicLifetimeStats,
		LuckyPoolInflow: p + t.LuckyPoolInflow, DLQ: p + t.DLQ,
		RelayOffsets: p + t.RelayOffsets, MicStateChangelog: p + t.MicStateChangelog,
	}
}
