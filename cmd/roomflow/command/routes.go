package command

import (
	"errors"
	"slices"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/processors/room"
	"github.com/hyapp/roomflow/sinks/imoutbox"
)

// roomEventConsumers are the stages that read kafka.topics.room_events, each
// with the event types it needs there. A relay.routes entry sends its type
// to another topic, where none of them reads it.
var roomEventConsumers = []struct {
	stage    string
	consumes func(eventType string) bool
}{
	{"the room processor", room.Consumes},
	{"the IM publisher", imoutbox.Consumes},
}

// checkRoutes refuses relay.routes entries that would hide an event type
// from a stage consuming it from kafka.topics.room_events; a route to that
// topic itself hides nothing. It lives here, not in internal/config, so that
// config knows no domain package. Every error is a *cfgerr.FieldError.
func checkRoutes(cfg *config.Config) error {
	var errs []error
	types := make([]string, 0, len(cfg.Relay.Routes))
	for typ := range cfg.Relay.Routes {
		types = append(types, typ)
	}
	slices.Sort(types) // stable error text
	for _, typ := range types {
		if cfg.Relay.Routes[typ] == cfg.Kafka.Topics.RoomEvents {
			continue
		}
		for _, c := range roomEventConsumers {
			if c.consumes(typ) {
				errs = append(errs, &cfgerr.FieldError{Key: "relay.routes." + typ,
					Msg: "consumed by " + c.stage + " from kafka.topics.room_events; routing it elsewhere would hide it"})
				break
			}
		}
	}
	return errors.Join(errs...)
}
