package relay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// snapshot relays the rows the position has not (ids above its high-water
// id, and its open holes) as of one consistent snapshot whose binlog
// position it returns, so the binlog from there has neither a gap nor an
// overlap with it. Batches carry a binlog-mode position without a binlog
// part (a snapshot in progress: a crash redoes it from the rows done, with
// a new snapshot, reading the holes the first one left too) and the last
// one the snapshot's binlog position. Memory is bounded as in poll mode:
// one batch of rows at a time, whatever the table's size.
func (r *Relay) snapshot(ctx context.Context, tr *Tracker, srv *binlogServer, out chan<- *batch) (BinlogPosition, error) {
	conn, err := r.db.Conn(ctx)
	if err != nil {
		return BinlogPosition{}, fmt.Errorf("relay: snapshot: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ"); err != nil {
		return BinlogPosition{}, fmt.Errorf("relay: snapshot: %w", err)
	}
	var at BinlogPosition
	if srv.flavor == FlavorMySQL {
		// MySQL reports no snapshot position: the GTID set executed
		// before the snapshot opens (a GTID is executed after its engine
		// commit, so its rows are in the snapshot). The binlog from there
		// repeats rows the snapshot has; stream drops them by id.
		var gtid string
		if err := conn.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_executed").Scan(&gtid); err != nil {
			return BinlogPosition{}, fmt.Errorf("relay: snapshot GTID position: %w", err)
		}
		at = BinlogPosition{Flavor: srv.flavor, GTIDSet: strings.ReplaceAll(gtid, "\n", "")}
	}
	if _, err := conn.ExecContext(ctx, "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"); err != nil {
		return BinlogPosition{}, fmt.Errorf("relay: snapshot: %w", err)
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK") //nolint:errcheck // read only
	if srv.flavor == FlavorMariaDB {
		if at, err = mariadbSnapshotPosition(ctx, conn); err != nil {
			return BinlogPosition{}, err
		}
	}
	r.log.Info("snapshot started", "gtid_set", at.GTIDSet, "file", at.File, "offset", at.Offset, "from_id", tr.High(), "open_gaps", tr.OpenHoles())

	src := &Source{db: conn, table: r.cfg.Table} // reads at the snapshot
	holes := appendIDs(nil, tr.Position().Holes)
	inline := r.cfg.MaxBatchBytes / 2 / r.cfg.BatchSize
	for {
		started := r.cfg.Now()
		var rows []Row
		var filled, more bool
		if len(holes) > 0 {
			n := min(len(holes), r.cfg.BatchSize)
			if rows, err = src.ByIDs(ctx, holes[:n], inline); err != nil {
				return BinlogPosition{}, err
			}
			holes, filled = holes[n:], true
		} else {
			if rows, err = src.After(ctx, tr.High(), r.cfg.BatchSize, inline); err != nil {
				return BinlogPosition{}, err
			}
			more = len(rows) == r.cfg.BatchSize
		}
		inline := PayloadBytes(rows)
		budget := &Budget{Max: r.cfg.MaxBatchBytes, Used: inline, Skip: r.tooLarge}
		if n := budget.Fit(rows); n < len(rows) {
			if filled {
				holes = append(appendRowIDs(nil, rows[n:]), holes...)
			}
			rows, more = rows[:n], true
		}
		fetched, err := src.LoadPayloads(ctx, rows, r.tooLarge)
		if err != nil {
			return BinlogPosition{}, err
		}
		ids := appendRowIDs(nil, rows)
		if filled {
			tr.Fill(ids)
		} else if _, err := tr.Advance(ids, started); err != nil {
			return BinlogPosition{}, err
		}
		last := !filled && !more
		p := BinlogPosition{}
		if last {
			p = at
		}
		if err := tr.SetBinlog(p); err != nil {
			return BinlogPosition{}, err
		}
		if len(rows) > 0 || last {
			b := newBatch(tr, rows, nil, started, inline+fetched)
			b.endsSnapshot = last
			if err := r.send(ctx, out, b); err != nil {
				return BinlogPosition{}, err
			}
		}
		if last {
			r.log.Info("snapshot done", "high", tr.High(), "open_gaps", tr.OpenHoles())
			return at, nil
		}
	}
}

// mariadbSnapshotPosition is the binlog position of conn's consistent
// snapshot: binlog_snapshot_file/_position and its GTID set.
func mariadbSnapshotPosition(ctx context.Context, conn *sql.Conn) (BinlogPosition, error) {
	var file string
	var offset uint64
	rs, err := conn.QueryContext(ctx, "SHOW STATUS LIKE 'binlog_snapshot_%'")
	if err != nil {
		return BinlogPosition{}, fmt.Errorf("relay: snapshot position: %w", err)
	}
	for rs.Next() {
		var k, v string
		if err := rs.Scan(&k, &v); err != nil {
			rs.Close()
			return BinlogPosition{}, fmt.Errorf("relay: snapshot position: %w", err)
		}
		switch strings.ToLower(k) {
		case "binlog_snapshot_file":
			file = v
		case "binlog_snapshot_position":
			offset, _ = strconv.ParseUint(v, 10, 64)
		}
	}
	rs.Close()
	if file == "" {
		return BinlogPosition{}, errors.New("relay: snapshot: the server reports no binlog_snapshot_file (binary log off?)")
	}
	var gtid sql.NullString
	if err := conn.QueryRowContext(ctx, "SELECT BINLOG_GTID_POS(?, ?)", file, offset).Scan(&gtid); err != nil {
		return BinlogPosition{}, fmt.Errorf("relay: snapshot GTID position: %w", err)
	}
	return BinlogPosition{Flavor: FlavorMariaDB, GTIDSet: gtid.String, File: file, Offset: offset}, nil
}

func appendRowIDs(out []uint64, rows []Row) []uint64 {
	for i := range rows {
		out = append(out, rows[i].ID)
	}
	return slices.Clip(out)
}
