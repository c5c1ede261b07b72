package command

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/hyapp/roomflow/internal/app"
	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/schemareg"
)

// errNoWireRegistry refuses kafka.public_wire_format confluent without a
// registry: a writer would have no schema ids to frame with. Checked by
// the writers at start, not by `roomflow config` (the readers need none).
var errNoWireRegistry = &cfgerr.FieldError{Key: "kafka.public_wire_format",
	Msg: "is confluent but schema_registry.url is not set: the writers look their schema ids up there (set schema_registry.url, or kafka.public_wire_format: plain)"}

// checkWireFormat is the writers' start check of kafka.public_wire_format
// against schema_registry.url (exit 2 naming both).
func checkWireFormat(d *app.Deps) error {
	if d.Config.Kafka.Confluent() && d.Config.SchemaRegistry.URL == "" {
		return errNoWireRegistry
	}
	return nil
}

// publicFrames is how writer name frames the public topics it writes
// (kafka.topics keys): plain, or in confluent mode the Confluent framing
// under the schema ids it looks up now, registering nothing. Until every
// id is found the process reports not ready (readiness check
// schema-ids-<name>) and New waits, retrying; it never falls back to
// plain. A stop while waiting returns ctx's error.
func publicFrames(ctx context.Context, d *app.Deps, name string, keys ...string) (schemareg.Frames, error) {
	if err := checkWireFormat(d); err != nil || !d.Config.Kafka.Confluent() {
		return schemareg.Frames{}, err
	}
	var specs []kafkax.TopicSpec
	for _, s := range d.Config.Kafka.Topics.Public() {
		if slices.Contains(keys, s.Key) {
			specs = append(specs, s)
		}
	}
	cl, err := schemareg.New(d.Config.SchemaRegistry, schemareg.Builtin())
	if err != nil {
		return schemareg.Frames{}, err
	}
	var mu sync.Mutex
	state := errors.New("looking the schema ids up")
	d.Health.AddReadiness("schema-ids-"+name, func() error {
		mu.Lock()
		defer mu.Unlock()
		return state
	})
	ids, err := cl.WaitIDs(ctx, specs, d.Log.With("component", name), func(err error) {
		mu.Lock()
		defer mu.Unlock()
		state = err
	})
	if err != nil {
		return schemareg.Frames{}, err
	}
	return schemareg.ConfluentFrames(ids), nil
}
