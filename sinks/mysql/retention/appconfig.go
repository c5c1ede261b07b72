package retention

import (
	"time"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/config"
)

// ConfigFrom maps purge.* onto Config and validates it, errors keyed
// purge.<field> ("purge.user_mic_event_consumption"). Each consumption
// table's Replay is the longest retention of the topics it dedupes
// (ReplayTopics): kafka.topic_retention, or longer where replay (how long
// the brokers may keep each topic's records, as purge reads them at
// start) says so, plus RoomEventsFutureSkew for the room events; a topic
// kept forever (<= 0) makes every window of its tables too short. own carries what no key gives: RelayedBelow (the
// relay's bound for room_outbox), DryRun, Registerer and Logger.
func ConfigFrom(app *config.Config, replay map[string]time.Duration, own Config) (Config, error) {
	p := app.Purge
	topics := ReplayTopics(app.Kafka.Topics)
	window := func(table string, age config.Duration) Window {
		var r time.Duration
		for _, t := range topics[table] {
			kept := app.Kafka.TopicRetention.D()
			if got, ok := replay[t]; ok && kept > 0 && (got <= 0 || got > kept) {
				kept = got
			}
			if kept <= 0 {
				return Window{Age: age.D(), Replay: kept}
			}
			if t == app.Kafka.Topics.RoomEvents {
				kept += RoomEventsFutureSkew
			}
			r = max(r, kept)
		}
		return Window{Age: age.D(), Replay: r}
	}
	c := Config{
		UserMicEventConsumption:    window(UserMicEventConsumption, p.UserMicEventConsumption),
		LuckyPoolInflowConsumption: window(LuckyPoolInflowConsumption, p.LuckyPoolInflowConsumption),
		LuckyEventConsumption:      window(LuckyEventConsumption, p.LuckyEventConsumption),
		LuckyRoomStatsHourly:       p.LuckyRoomStatsHourly.D(),
		RoomOutbox:                 RoomOutboxConfig{Enabled: p.RoomOutbox.Enabled, Age: p.RoomOutbox.Age.D()},
		RelayedBelow:               own.RelayedBelow,
		BatchSize:                  p.BatchSize,
		BatchPause:                 p.BatchPause.D(),
		DryRun:                     own.DryRun,
		Registerer:                 own.Registerer,
		Logger:                     own.Logger,
	}
	return c, cfgerr.Under("purge", map[string]string{"relayed_below": "purge.room_outbox.enabled"}, c.Validate())
}

// RoomEventsFutureSkew is how far ahead of now the relay may stamp a room
// event (relay.MaxFutureSkew: its occurred_at_ms): Kafka keeps a segment
// until its newest timestamp is retention.ms old, so such a record
// outlives retention.ms + segment.ms by that much.
const RoomEventsFutureSkew = time.Hour

// ReplayTopics lists, per consumption table, the topics whose replay
// reaches it: the sink's input topic and the topics upstream of it whose
// reprocessing reproduces its event ids.
func ReplayTopics(t config.Topics) map[string][]string {
	return map[string][]string{
		UserMicEventConsumption:    {t.MicLedger, t.UserMicEvents, t.RoomEvents},
		LuckyPoolInflowConsumption: {t.LuckyPoolInflow, t.RoomEvents},
		LuckyEventConsumption:      {t.LuckyEvents},
	}
}
