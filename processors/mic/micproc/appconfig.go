package micproc

import (
	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/processors/mic"
	"github.com/hyapp/roomflow/processors/streams"
)

// ConfigFrom maps the mic processor's keys onto Config and validates it,
// errors keyed by the application's dotted keys: the runtime
// (streams.ConfigFrom; rt gives its Registerer and Logger) on
// kafka.topics.user_mic_events in process.mic_group with the changelog
// kafka.topics.mic_state_changelog, the output topics kafka.topics.mic_*,
// the mic.* settings, app_code. instanceID is the replica's --instance-id
// ("": none).
func ConfigFrom(app *config.Config, rt streams.Config, instanceID string) (Config, error) {
	t := app.Kafka.Topics
	m := app.Mic
	rt.Name, rt.Group, rt.Input = Name, app.Process.MicGroup, t.UserMicEvents
	c := Config{
		Runtime: streams.ConfigFrom(app, rt, instanceID),
		Topics: Topics{
			Ledger:         t.MicLedger,
			SessionClosed:  t.MicSessionClosed,
			DailyStats:     t.MicDailyStats,
			LifetimeStats:  t.MicLifetimeStats,
			DailyTotals:    t.MicDailyTotals,
			LifetimeTotals: t.MicLifetimeTotals,
		},
		Settings: Settings{
			Policy: mic.Policy{
				PendingPublishMaxAge:    m.PendingPublishMaxAge.D(),
				PublishingSessionMaxAge: m.PublishingSessionMaxAge.D(),
			},
			DisableCompensation:    !m.CompensationEnabled,
			CompensationInterval:   m.CompensationInterval.D(),
			CompensationBatchSize:  m.CompensationBatchSize,
			ClosedSessionRetention: m.ClosedSessionRetention.D(),
			DayRoomRetention:       m.DayRoomRetention.D(),
			DisableTotals:          !m.TotalsEnabled,
			DayTotalsRetention:     m.DayTotalsRetention.D(),
		},
		AppCode: app.AppCode,
	}
	c.Runtime.Changelog = t.MicStateChangelog
	return c, cfgerr.Under("process.mic", appKeys, c.Validate())
}

var appKeys = streams.AppKeys("kafka.topics.user_mic_events", "process.mic_group", map[string]string{
	"runtime.changelog":                          "kafka.topics.mic_state_changelog",
	"topics.ledger":                              "kafka.topics.mic_ledger",
	"topics.session_closed":                      "kafka.topics.mic_session_closed",
	"topics.daily_stats":                         "kafka.topics.mic_daily_stats",
	"topics.lifetime_stats":                      "kafka.topics.mic_lifetime_stats",
	"topics.frames":                              "kafka.public_wire_format",
	"topics.daily_totals":                        "kafka.topics.mic_daily_totals",
	"topics.lifetime_totals":                     "kafka.topics.mic_lifetime_totals",
	"settings.policy.pending_publish_max_age":    "mic.pending_publish_max_age",
	"settings.policy.publishing_session_max_age": "mic.publishing_session_max_age",
	"settings.compensation_interval":             "mic.compensation_interval",
	"settings.compensation_batch_size":           "mic.compensation_batch_size",
	"settings.closed_session_retention":          "mic.closed_session_retention",
	"settings.day_room_retention":                "mic.day_room_retention",
	"settings.day_totals_retention":              "mic.day_totals_retention",
	"app_code":                                   "app_code",
})
