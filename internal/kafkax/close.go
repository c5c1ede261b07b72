package kafkax

import (
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// CloseWithin closes cl, waiting at most d, and reports whether the close
// finished. kgo's Close first leaves the consumer group, and leaving waits
// for the group's management loop, which may sit in a JoinGroup or
// SyncGroup the coordinator answers only after the rebalance timeout (a
// rebalance waiting for a member that is gone): a stopping process would
// overrun shutdown.timeout by up to a minute. Past d the close goes on in
// the background (the process is exiting) and a WARN says so; a member
// that did not leave is expired by the broker after the session timeout.
// Call cl.AllowRebalance first if the client blocks rebalances on poll.
func CloseWithin(cl *kgo.Client, d time.Duration, log *slog.Logger) bool {
	closed := make(chan struct{})
	go func() {
		cl.Close()
		close(closed)
	}()
	bound := time.NewTimer(max(d, 0))
	defer bound.Stop()
	select {
	case <-closed:
		return true
	case <-bound.C:
		log.Warn("kafka client did not close within the shutdown bound (a group join still waits for the coordinator); closing it in the background, the group expires the member after the session timeout",
			"bound", d.String())
		return false
	}
}
