package room

import (
	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/processors/streams"
)

// ConfigFrom maps the room processor's keys onto Config and validates it,
// errors keyed by the application's dotted keys: the runtime
// (streams.ConfigFrom; rt gives its Registerer and Logger) on
// kafka.topics.room_events in process.room_group, the outputs
// kafka.topics.user_mic_events and lucky_pool_inflow, app_code.
// instanceID is the replica's --instance-id ("": none).
func ConfigFrom(app *config.Config, rt streams.Config, instanceID string) (Config, error) {
	t := app.Kafka.Topics
	rt.Name, rt.Group, rt.Input = Name, app.Process.RoomGroup, t.RoomEvents
	c := Config{
		Runtime:     streams.ConfigFrom(app, rt, instanceID),
		MicTopic:    t.UserMicEvents,
		InflowTopic: t.LuckyPoolInflow,
		AppCode:     app.AppCode,
	}
	return c, cfgerr.Under("process.room", appKeys, c.Validate())
}

var appKeys = streams.AppKeys("kafka.topics.room_events", "process.room_group", map[string]string{
	"mic_topic":    "kafka.topics.user_mic_events",
	"inflow_topic": "kafka.topics.lucky_pool_inflow",
	"frames":       "kafka.public_wire_format",
	"app_code":     "app_code",
})
