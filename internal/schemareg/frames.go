package schemareg

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/hyapp/roomflow/internal/backoff"
	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/schemas/envelope"
)

// Frames is a writer's framing of the public topics it writes: plain (the
// zero Frames) or the Confluent framing under the ids Lookup found.
type Frames struct {
	ids map[string]int // nil: plain
}

// ConfluentFrames frames with ids (topic name -> schema id).
func ConfluentFrames(ids map[string]int) Frames { return Frames{ids: ids} }

// Confluent reports whether f frames.
func (f Frames) Confluent() bool { return f.ids != nil }

// For is the framing of md's values on topic. In confluent mode a topic
// without an id is an error, never a plain fallback.
func (f Frames) For(topic string, md protoreflect.MessageDescriptor) (envelope.Framing, error) {
	if f.ids == nil {
		return envelope.Framing{}, nil
	}
	id, ok := f.ids[topic]
	if !ok {
		return envelope.Framing{}, fmt.Errorf("schema registry: no schema id for topic %s", topic)
	}
	return envelope.Confluent(uint32(id), md), nil
}

// WaitIDs looks the schema ids of specs up until every one is found or ctx
// ends (its error then), registering nothing. notReady gets each failure
// and nil once found: a writer reports not ready meanwhile. Every failure
// is logged; a schema the registry lacks is retried too (the migrate Job
// may not have registered this release's schemas yet).
func (c *Client) WaitIDs(ctx context.Context, specs []kafkax.TopicSpec, log *slog.Logger, notReady func(error)) (map[string]int, error) {
	b := backoff.MustNew(backoff.Config{Max: 30 * time.Second})
	for attempt := 1; ; attempt++ {
		ids, err := c.Lookup(ctx, specs)
		notReady(err)
		if err == nil {
			log.Info("schema ids found; framing public records in the confluent wire format", "ids", ids)
			return ids, nil
		}
		log.Warn("schema ids not found yet; not ready", "attempt", attempt, "error", err)
		if err := backoff.Sleep(ctx, b.Delay(attempt)); err != nil {
			return nil, err
		}
	}
}
