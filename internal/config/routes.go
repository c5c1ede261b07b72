package config

import (
	"errors"
	"slices"

	"github.com/hyapp/roomflow/internal/cfgerr"
)

// RouteConsumer is a stage that reads kafka.topics.room_events: its name
// for errors and the event types it needs there. The command line names
// them, so that config knows no domain package.
type RouteConsumer struct {
	Stage    string
	Consumes func(eventType string) bool
}

// CheckRoutes refuses relay.routes entries that would hide an event type
// from a consumer reading it from kafka.topics.room_events; a route to
// that topic itself hides nothing. Every error is a *cfgerr.FieldError
// keyed relay.routes.<type>, in type order.
func (c *Config) CheckRoutes(consumers ...RouteConsumer) error {
	var errs []error
	types := make([]string, 0, len(c.Relay.Routes))
	for typ := range c.Relay.Routes {
		types = append(types, typ)
	}
	slices.Sort(types) // stable error text
	for _, typ := range types {
		if c.Relay.Routes[typ] == c.Kafka.Topics.RoomEvents {
			continue
		}
		for _, rc := range consumers {
			if rc.Consumes(typ) {
				errs = append(errs, &cfgerr.FieldError{Key: "relay.routes." + typ,
					Msg: "consumed by " + rc.Stage + " from kafka.topics.room_events; routing it elsewhere would hide it"})
				break
			}
		}
	}
	return errors.Join(errs...)
}
