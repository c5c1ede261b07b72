package relay

import (
	"context"
	"fmt"
)

// readBinlog is binlog mode's read: the snapshot first when the position
// has none (first start, a switch from poll mode, --resnapshot), then the
// binlog from the position, into the same batches the poll read makes.
//
// Its parts, as go-mysql's canal splits the same work: the start-up checks
// (checkBinlogServer, binlog_checks.go), the snapshot (binlog_snapshot.go),
// the stream (binlogStream, binlog_stream.go) over where it is in the binlog
// (streamState, binlog_state.go), and row decoding (binlog_rows.go).
func (r *Relay) readBinlog(ctx context.Context, tr *Tracker, out chan<- *batch) error {
	srv, err := r.checkBinlogServer(ctx)
	if err != nil {
		return err
	}
	pos := tr.Binlog()
	if pos.Flavor != "" && pos.Flavor != srv.flavor {
		return fmt.Errorf("relay: the stored binlog position is a %s server's, the server is %s: run `roomflow relay --resnapshot`", pos.Flavor, srv.flavor)
	}
	if pos.IsZero() {
		if pos, err = r.snapshot(ctx, tr, srv, out); err != nil {
			return err
		}
	}
	return r.stream(ctx, tr, srv, pos, out)
}
