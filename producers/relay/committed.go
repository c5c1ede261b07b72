package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/kafkax"
)

// idleRead is how long ReadCommittedPosition waits for a record that may
// not come (see there).
const idleRead = 3 * time.Second

// RelayedBelow is the id below which every room_outbox row has been
// relayed or given up: the lowest open hole, else High + 1. Rows with
// higher ids may still be read by the relay, so a tool that deletes rows
// (roomflow purge) must stay below it.
func (p Position) RelayedBelow() uint64 {
	if len(p.Holes) > 0 {
		return p.Holes[0].ID
	}
	return p.High + 1
}

// ReadCommittedPosition returns the last position relay name committed to
// topic (its OffsetsTopic), read with read_committed up to the partition's
// last stable offset at the call, without joining the relay's transactions:
// unlike a leader's takeover (loadPosition), it fences no one and may run
// next to a leading relay. The position can only lag the leader's (a
// transaction committing meanwhile is not waited for), and a lagging
// position is a lower bound of what was relayed: its High is lower and its
// holes below that High are still open or were filled since. found is
// false when the relay has never committed.
func ReadCommittedPosition(ctx context.Context, cluster kafkax.Cluster, topic, name string) (pos Position, found bool, err error) {
	adm, err := cluster.NewClient(Component + "-position-reader")
	if err != nil {
		return Position{}, false, fmt.Errorf("relay: position reader: %w", err)
	}
	ends, err := kadm.NewClient(adm).ListCommittedOffsets(ctx, topic)
	adm.Close()
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return Position{}, false, fmt.Errorf("relay: list offsets of %s: %w", topic, err)
	}
	end, ok := ends.Lookup(topic, positionPartition)
	if !ok {
		return Position{}, false, fmt.Errorf("relay: offsets topic %s has no partition %d", topic, positionPartition)
	}
	cl, err := cluster.NewClient(Component+"-position-reader",
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {positionPartition: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords())
	if err != nil {
		return Position{}, false, fmt.Errorf("relay: position reader: %w", err)
	}
	defer cl.Close()
	var last []byte
	for next := int64(0); next < end.Offset; {
		// Offsets of aborted records below the end are never returned:
		// a poll that waits idleRead for nothing means the rest is such.
		pctx, cancel := context.WithTimeout(ctx, idleRead)
		fs := cl.PollFetches(pctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return Position{}, false, err
		}
		if fs.Empty() && pctx.Err() != nil {
			break
		}
		if err := kafkax.FetchErrors(fs, func(t string, p int32, err error) error { return fmt.Errorf("relay: read %s/%d: %w", t, p, err) }); err != nil {
			return Position{}, false, err
		}
		fs.EachRecord(func(r *kgo.Record) {
			next = r.Offset + 1
			if !r.Attrs.IsControl() && string(r.Key) == name {
				last = r.Value
			}
		})
	}
	return lastPosition(name, last)
}
