package kafkax

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"
)

// CloseWithin closes cl, waiting until ctx ends at most (the rest of
// shutdown.timeout), and reports whether the close finished. kgo's Close first leaves the consumer group, and leaving waits
// for the group's management loop, which may sit in a JoinGroup or
// SyncGroup the coordinator answers only after the rebalance timeout (a
// rebalance waiting for a member that is gone): a stopping process would
// overrun shutdown.timeout by up to a minute. Past ctx the close goes on in
// the background (the process is exiting) and a WARN says so; a member
// that did not leave is expired by the broker after the session timeout.
// Call cl.AllowRebalance first if the client blocks rebalances on poll.
func CloseWithin(ctx context.Context, cl *kgo.Client, log *slog.Logger) bool {
	closed := make(chan struct{})
	go func() {
		cl.Close()
		close(closed)
	}()
	select {
	case <-closed:
		return true
	case <-ctx.Done():
		log.Warn("kafka client did not close within shutdown.timeout (a group join still waits for the coordinator); closing it in the background, the group expires the member after the session timeout")
		return false
	}
}
