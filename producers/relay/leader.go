package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/kafkax"
)

// LeaderGroup is the consumer group the replicas sharing transactionalID
// (Config.TransactionalID) elect their leader in.
func LeaderGroup(transactionalID string) string { return transactionalID + ".leader" }

// elector picks one active relay among replicas sharing
// relay.transactional_id, with Kafka's own group protocol instead of a
// home-made lease: every replica joins the consumer group
// "<transactional_id>.leader" subscribed to the relay offsets topic, and the
// member that owns partition 0 (where positions live) leads. The cooperative
// sticky balancer keeps partition 0 with its owner when a standby joins, so
// a healthy leader is not disturbed; when the leader dies or freezes, the
// coordinator drops it after the session timeout and hands partition 0 to a
// standby.
//
// Group membership alone cannot stop a frozen leader that wakes up still
// believing it leads: that is what transactional-id fencing is for. The new
// leader's InitProducerID bumps the epoch, so the old one's next produce or
// EndTxn fails and it steps down.
type elector struct {
	cl  *kgo.Client
	log *slog.Logger

	mu      sync.Mutex
	leading bool
	changed chan struct{} // closed and replaced on every change of leading
	refused error         // a *RefusedError once the group refused this member for good
	failed  chan struct{} // closed when refused is set
}

func newElector(log *slog.Logger) *elector {
	return &elector{log: log, changed: make(chan struct{}), failed: make(chan struct{})}
}

// RefusedError means a broker refused the relay's own settings in a way
// no retry changes: the leader group (Err is then a
// *kafkax.GroupRefusedError: a session timeout outside
// group.min/max.session.timeout.ms, no group ACL, an invalid group id) or
// a transaction timeout above transaction.max.timeout.ms. No replica with
// this config can lead, so Run returns it instead of retrying for ever.
type RefusedError struct {
	Op  string // what was refused: "leader group" or "transaction timeout <d>"
	Err error
}

func (e *RefusedError) Error() string {
	var ge *kafkax.GroupRefusedError
	if errors.As(e.Err, &ge) {
		return fmt.Sprintf("relay: %s: %v", e.Op, e.Err) // the group error names the refusal
	}
	return fmt.Sprintf("relay: the broker refuses %s: %v", e.Op, e.Err)
}

func (e *RefusedError) Unwrap() error { return e.Err }

// groupOpts are the group options that drive the elector.
func (e *elector) groupOpts(group, topic string, session time.Duration, instanceID string) []kgo.Opt {
	hb := max(session/6, 100*time.Millisecond)
	opts := []kgo.Opt{
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.SessionTimeout(session),
		kgo.HeartbeatInterval(hb),
		kgo.RebalanceTimeout(session),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			if slices.Contains(m[topic], positionPartition) {
				e.set(true)
			}
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			if slices.Contains(m[topic], positionPartition) {
				e.set(false)
			}
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			if slices.Contains(m[topic], positionPartition) {
				e.set(false)
			}
		}),
	}
	if instanceID != "" {
		opts = append(opts, kgo.InstanceID(instanceID))
	}
	return opts
}

func (e *elector) set(leading bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.leading == leading {
		return
	}
	e.leading = leading
	e.log.Info("leader group: partition 0 of the offsets topic", "owned", leading)
	close(e.changed)
	e.changed = make(chan struct{})
}

func (e *elector) state() (bool, <-chan struct{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.leading, e.changed
}

// run polls the group client (its fetches are paused: positions are not
// needed here) so that group errors surface and the client's poll-driven
// bookkeeping runs; membership callbacks fire from the group goroutine.
// A group error no retry changes ends the elector's campaign (await).
func (e *elector) run(ctx context.Context, group string) {
	for ctx.Err() == nil {
		fs := e.cl.PollRecords(ctx, 1000)
		if fs.IsClientClosed() {
			return
		}
		if err := kafkax.RefusedGroup(group, fs); err != nil {
			e.refuse(&RefusedError{Op: "leader group", Err: err})
		}
	}
}

func (e *elector) refuse(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.refused == nil {
		e.refused = err
		close(e.failed)
	}
}

// await blocks until this replica leads (or ctx ends, or the group refused
// it for good: that *RefusedError) and returns a context that is cancelled
// as soon as leadership is lost or ctx ends.
func (e *elector) await(ctx context.Context) (context.Context, context.CancelFunc, error) {
	for {
		leading, changed := e.state()
		if leading {
			break
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-e.failed:
			return nil, nil, e.refused
		case <-changed:
		}
	}
	lctx, cancel := context.WithCancel(ctx)
	go func() {
		for {
			leading, changed := e.state()
			if !leading {
				cancel()
				return
			}
			select {
			case <-lctx.Done():
				return
			case <-changed:
			}
		}
	}()
	return lctx, cancel, nil
}
