package command

import (
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/processors/room"
	"github.com/hyapp/roomflow/sinks/imoutbox"
)

// roomEventConsumers are the stages that read kafka.topics.room_events,
// each with the event types it needs there: config.CheckRoutes refuses a
// relay.routes entry that would send one of them elsewhere.
var roomEventConsumers = []config.RouteConsumer{
	{Stage: "the room processor", Consumes: room.Consumes},
	{Stage: "the IM publisher", Consumes: imoutbox.Consumes},
}
