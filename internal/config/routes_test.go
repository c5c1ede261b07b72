package config

import (
	"slices"
	"testing"

	"github.com/hyapp/roomflow/internal/cfgerr"
)

// A route hides a type from the first consumer that reads it, unless it
// goes to the room events topic itself; types nobody reads may go
// anywhere.
func TestCheckRoutes(t *testing.T) {
	cfg := Default()
	cfg.Relay.Routes = map[string]string{"B": "elsewhere", "A": "elsewhere", "C": cfg.Kafka.Topics.RoomEvents, "D": "elsewhere"}
	reads := func(types ...string) func(string) bool {
		return func(t string) bool { return slices.Contains(types, t) }
	}
	err := cfg.CheckRoutes(RouteConsumer{"the first", reads("A", "C")}, RouteConsumer{"the second", reads("A", "B")})
	if keys := cfgerr.Keys(err); !slices.Equal(keys, []string{"relay.routes.A", "relay.routes.B"}) {
		t.Fatalf("keys %v: %v", keys, err)
	}
	want := "config: relay.routes.A: consumed by the first from kafka.topics.room_events; routing it elsewhere would hide it\n" +
		"config: relay.routes.B: consumed by the second from kafka.topics.room_events; routing it elsewhere would hide it"
	if err.Error() != want {
		t.Errorf("got\n%s\nwant\n%s", err, want)
	}
	if err := cfg.CheckRoutes(); err != nil {
		t.Errorf("no consumer: %v", err)
	}
}
