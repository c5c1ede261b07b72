package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// BinlogPurgedError means the server no longer has the binlog at the
// stored position (purged by binlog_expire_logs_seconds or PURGE BINARY
// LOGS, or a file/offset position after a failover to another server):
// the rows between cannot be read from the binlog any more. The relay
// stops relaying (roomflow_relay_binlog_purged = 1) until an operator runs
// `roomflow relay --resnapshot`.
type BinlogPurgedError struct {
	Position BinlogPosition
	Err      error // the server's error
}

func (e *BinlogPurgedError) Error() string {
	return fmt.Sprintf("relay: the binlog at the stored position %s is gone (purged, or another server after a failover): %v; run `roomflow relay --resnapshot` to snapshot the table again", e.Position.where(), e.Err)
}

// where names a binlog position in an error: its GTID set, else its file
// and offset.
func (b BinlogPosition) where() string {
	if b.GTIDSet != "" {
		return b.GTIDSet
	}
	return b.File + ":" + strconv.FormatUint(b.Offset, 10)
}

func (e *BinlogPurgedError) Unwrap() error { return e.Err }

// binlogSyncer returns a syncer registered as a replica with server id
// relay.binlog.server_id. Reconnects are not the library's: a broken
// stream ends the leader session, and the next one checks leadership
// before it connects again.
func (r *Relay) binlogSyncer(s *binlogServer, keep func(*replication.RowsEvent) bool, handler replication.EventHandler) (*replication.BinlogSyncer, error) {
	host, port, err := net.SplitHostPort(s.dsn.Addr)
	if err != nil {
		return nil, fmt.Errorf("relay: binlog.dsn address: %w", err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("relay: binlog.dsn port: %w", err)
	}
	flavor := gomysql.MySQLFlavor
	if s.flavor == FlavorMariaDB {
		flavor = gomysql.MariaDBFlavor
	}
	hb := r.cfg.Binlog.HeartbeatPeriod
	return replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID:                r.cfg.Binlog.ServerID,
		Localhost:               ReplicaHost,
		Flavor:                  flavor,
		Host:                    host,
		Port:                    uint16(p),
		User:                    s.dsn.User,
		Password:                s.dsn.Passwd,
		TLSConfig:               s.dsn.TLS,
		HeartbeatPeriod:         hb,
		ReadTimeout:             3*hb + 10*time.Second,
		DisableRetrySync:        true,
		EventCacheCount:         1, // events go to handler; the streamer only carries the error that ends the stream
		SynchronousEventHandler: handler,
		Logger:                  slog.New(warnOnly{r.log.Handler()}).With("lib", "go-mysql"),
		RowsEventDecodeFunc: func(e *replication.RowsEvent, data []byte) error {
			pos, err := e.DecodeHeader(data)
			if err != nil || !keep(e) {
				return err // other tables' rows, UPDATEs and DELETEs are not decoded
			}
			return e.DecodeData(pos, data)
		},
	}), nil
}

// warnOnly passes go-mysql's warnings and errors on, errors as warnings:
// the relay reports every failure that matters as its own error (a broken
// stream ends the leader session), and the library's own ERROR lines on a
// killed connection ("kill connection ... Unknown thread id") would trip
// alerts on error logs. Its info lines (a line per connect and rotate) are
// not the relay's to log.
type warnOnly struct{ slog.Handler }

func (w warnOnly) Handle(ctx context.Context, r slog.Record) error {
	if r.Level > slog.LevelWarn {
		r.Level = slog.LevelWarn
	}
	return w.Handler.Handle(ctx, r)
}

func (w warnOnly) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && w.Handler.Enabled(ctx, l)
}
func (w warnOnly) WithAttrs(as []slog.Attr) slog.Handler { return warnOnly{w.Handler.WithAttrs(as)} }
func (w warnOnly) WithGroup(g string) slog.Handler       { return warnOnly{w.Handler.WithGroup(g)} }

// eventFunc is a replication.EventHandler.
type eventFunc func(*replication.BinlogEvent) error

func (f eventFunc) HandleEvent(e *replication.BinlogEvent) error { return f(e) }

// binlogEvent is an event or the error that ended the stream.
type binlogEvent struct {
	ev  *replication.BinlogEvent
	err error
}

// relayTable is the table binlog mode relays: Table in the relay
// database's schema.
type relayTable struct {
	schema, name string
}

// is reports whether tm maps the relayed table.
func (t relayTable) is(tm *replication.TableMapEvent) bool {
	return tm != nil && string(tm.Table) == t.name && string(tm.Schema) == t.schema
}

// stream relays the binlog from pos until ctx ends or the stream fails.
func (r *Relay) stream(ctx context.Context, tr *Tracker, srv *binlogServer, pos BinlogPosition, out chan<- *batch) error {
	table := relayTable{schema: srv.schema, name: r.cfg.Table}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The syncer's reading goroutine hands each parsed event to the
	// binlogStream through evs: a few events (each at most one row image
	// more than binlog_row_event_max_size) ahead of it; a slow commit slows
	// the read.
	evs := make(chan binlogEvent, 8)
	syncer, err := r.binlogSyncer(srv, func(e *replication.RowsEvent) bool {
		return e.Type() == replication.EnumRowsEventTypeInsert && table.is(e.Table)
	}, eventFunc(func(ev *replication.BinlogEvent) error {
		select {
		case evs <- binlogEvent{ev: ev}:
			return nil
		case <-sctx.Done():
			return sctx.Err()
		}
	}))
	if err != nil {
		return err
	}
	defer syncer.Close()
	st, err := newStreamState(srv.flavor, pos)
	if err != nil {
		return err
	}
	if err := r.startSync(sctx, syncer, st, pos, evs); err != nil {
		return err
	}
	now := r.cfg.Now()
	s := &binlogStream{
		r: r, tr: tr, out: out, evs: evs, table: table, st: st,
		// On MySQL the snapshot overlaps the binlog (see snapshot): a row
		// at or below the high-water id that is not an open gap was
		// relayed. On MariaDB the gaps are the poll fallback's only and
		// the binlog decides.
		byID:    srv.flavor == FlavorMySQL,
		pending: binlogBatch{started: now},
		emitted: pos, lastEmit: now,
	}
	return s.run(ctx)
}

// startSync starts the stream at st's GTID set, or at pos's file and
// offset when st has none, and hands the error that ends it to evs. A
// refusal to stream from there is returned as purged does.
func (r *Relay) startSync(ctx context.Context, syncer *replication.BinlogSyncer, st *streamState, pos BinlogPosition, evs chan<- binlogEvent) error {
	var streamer *replication.BinlogStreamer
	var err error
	if st.gset != nil {
		streamer, err = syncer.StartSyncGTID(st.gset.Clone())
	} else {
		streamer, err = syncer.StartSync(gomysql.Position{Name: pos.File, Pos: uint32(pos.Offset)})
	}
	if err != nil {
		return r.purged(pos, err)
	}
	r.m.binlogPurged.Set(0)
	r.log.Info("streaming the binlog", "gtid_set", pos.GTIDSet, "file", pos.File, "offset", pos.Offset, "rows_done", pos.Rows)
	go func() {
		// With a synchronous handler the streamer carries only the error
		// that ended the stream.
		_, err := streamer.GetEvent(ctx)
		if err == nil {
			err = errors.New("relay: binlog stream: unexpected event outside the handler")
		}
		select {
		case evs <- binlogEvent{err: err}:
		case <-ctx.Done():
		}
	}()
	return nil
}

// binlogStream turns the events of one leader session's binlog stream
// into batches: it tracks where the stream is (streamState), decodes the
// relayed table's INSERT rows, and cuts batches by BatchSize,
// MaxBatchBytes, latency and the heartbeat.
type binlogStream struct {
	r     *Relay
	tr    *Tracker
	out   chan<- *batch
	evs   <-chan binlogEvent
	table relayTable
	st    *streamState
	cols  columnMap // the relayed table's columns as its last TABLE_MAP names them
	byID  bool      // drop rows the position has by id (MySQL's overlapping snapshot)

	pending   binlogBatch    // the batch being filled
	emitted   BinlogPosition // the position of the last batch handed on
	lastEmit  time.Time
	heartbeat bool // a heartbeat arrived since the last batch
}

// binlogBatch is the batch a binlogStream is filling.
type binlogBatch struct {
	rows      []Row
	bytes     int // payload bytes of rows
	abandoned []Abandoned
	started   time.Time // when the event of its first row arrived (without rows: the last event)
}

// run relays events until ctx ends or the stream fails.
func (s *binlogStream) run(ctx context.Context) error {
	for {
		e, got, err := s.await(ctx)
		if err != nil {
			return err
		}
		if !got {
			continue
		}
		if err := s.handle(ctx, e); err != nil {
			return err
		}
	}
}

// await is the next event. With none queued, it first relays what is
// pending now (latency), or moves an idle position along and gives up old
// holes on the heartbeat's clock; while the committer still has a batch
// waiting, it keeps filling this one instead: under load batches grow
// towards BatchSize. got is false when a due batch should be tried again.
func (s *binlogStream) await(ctx context.Context) (e binlogEvent, got bool, err error) {
	select {
	case e = <-s.evs:
		return e, true, nil
	default:
	}
	// Holes are given up on the clock, as in poll mode, not only when
	// rows come: an idle stream still wakes for each heartbeat.
	s.pending.abandoned = append(s.pending.abandoned, s.tr.Expire(s.r.cfg.Now())...)
	due := s.due()
	if due && len(s.out) == 0 {
		if err := s.emit(ctx); err != nil {
			return e, false, err
		}
		due = false
	}
	var recheck <-chan time.Time
	if due {
		recheck = time.After(time.Millisecond)
	}
	select {
	case e = <-s.evs:
		return e, true, nil
	case <-recheck:
		return e, false, nil
	case <-ctx.Done():
		return e, false, ctx.Err()
	}
}

// due reports whether a batch should be handed on now: rows or holes
// given up are pending, or the position moved since the last batch and a
// heartbeat arrived or a heartbeat period passed.
func (s *binlogStream) due() bool {
	return len(s.pending.rows) > 0 || len(s.pending.abandoned) > 0 || (s.heartbeat && s.st.current() != s.emitted) ||
		(s.st.current() != s.emitted && s.r.cfg.Now().Sub(s.lastEmit) >= s.r.cfg.Binlog.HeartbeatPeriod)
}

// handle moves the stream's state along one event, relaying its rows.
func (s *binlogStream) handle(ctx context.Context, e binlogEvent) error {
	if e.err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return s.r.purged(s.emitted, e.err)
	}
	if len(s.pending.rows) == 0 {
		s.pending.started = s.r.cfg.Now()
	}
	h := e.ev.Header
	switch ev := e.ev.Event.(type) {
	case *replication.RotateEvent:
		s.st.file, s.st.offset = string(ev.NextLogName), ev.Position
		return nil
	case *replication.MariadbGTIDEvent:
		s.st.openMariaDB(ev)
	case *replication.GTIDEvent:
		if err := s.st.openMySQL(ev); err != nil {
			return err
		}
	case *replication.XIDEvent:
		s.st.offset = uint64(h.LogPos)
		s.st.commit()
	case *replication.QueryEvent:
		s.st.query(h.LogPos, ev.Query)
	case *replication.TableMapEvent:
		if s.table.is(ev) {
			s.cols = tableColumns(ev, s.table.schema+"."+s.table.name, s.st.current())
		}
	case *replication.RowsEvent:
		if err := s.rows(ctx, ev); err != nil {
			return err
		}
	case *replication.GenericEvent:
		if h.EventType == replication.HEARTBEAT_EVENT || h.EventType == replication.HEARTBEAT_LOG_EVENT_V2 {
			s.heartbeat = true
			return nil // a heartbeat's LogPos is the server's, not a stream position
		}
	}
	if h.LogPos > 0 && !s.st.inTxn {
		s.st.offset = uint64(h.LogPos)
	}
	return nil
}

// rows relays the rows of an INSERT into the relayed table (the syncer
// decodes no other rows).
func (s *binlogStream) rows(ctx context.Context, ev *replication.RowsEvent) error {
	if ev.Type() != replication.EnumRowsEventTypeInsert || !s.table.is(ev.Table) {
		return nil
	}
	if ev.TableID != s.cols.tableID {
		return fmt.Errorf("relay: binlog rows of table id %d without its TABLE_MAP", ev.TableID)
	}
	if s.cols.err != nil {
		return s.cols.err
	}
	now := s.r.cfg.Now()
	for _, v := range ev.Rows {
		if err := s.row(ctx, v, now); err != nil {
			return err
		}
	}
	return nil
}

// row relays one row image of the open transaction, counting it in the
// transaction's rows done only once it is in a batch (or was relayed
// before), so that a stored position never counts a row no batch holds.
func (s *binlogStream) row(ctx context.Context, image []any, now time.Time) error {
	if s.st.skip > 0 {
		s.st.rows++
		s.st.skip-- // relayed before a crash or a leader change
		return nil
	}
	row, err := binlogRow(&s.cols, image)
	if err != nil {
		return fmt.Errorf("relay: binlog row of %s: %w", s.r.cfg.Table, err)
	}
	if s.byID && row.ID <= s.tr.High() && !s.tr.IsOpen(row.ID) {
		// In the snapshot, or a gap given up; or an id reissued
		// (AUTO_INCREMENT reset), which stops as in poll mode instead of
		// being dropped.
		if err := s.r.checkReissue(ctx, s.tr.High()); err != nil {
			return err
		}
		s.st.rows++
		return nil
	}
	if s.r.tooLarge(&row) {
		row.Payload = nil // dead-lettered by size: not held
	}
	// A row that would take the batch past max_batch_bytes starts the
	// next one (as poll mode's Budget does); the position emitted does
	// not count it yet.
	if len(s.pending.rows) > 0 && s.pending.bytes+len(row.Payload) > s.r.cfg.MaxBatchBytes {
		if err := s.emit(ctx); err != nil {
			return err
		}
	}
	s.st.rows++
	if err := s.track(row.ID, now); err != nil {
		return err
	}
	s.pending.rows = append(s.pending.rows, row)
	s.pending.bytes += len(row.Payload)
	if len(s.pending.rows) >= s.r.cfg.BatchSize || s.pending.bytes >= s.r.cfg.MaxBatchBytes {
		return s.emit(ctx)
	}
	return nil
}

// track records a relayed id in the tracker: above the high-water id it
// advances it (opening holes below; those evicted are dead-lettered),
// below it fills a hole.
func (s *binlogStream) track(id uint64, now time.Time) error {
	if id <= s.tr.High() {
		s.tr.Fill([]uint64{id})
		return nil
	}
	evicted, err := s.tr.Advance([]uint64{id}, now)
	if err != nil {
		return err
	}
	s.pending.abandoned = append(s.pending.abandoned, evicted...)
	return nil
}

// emit hands the pending rows on as a batch with the stream's current
// position (also when there are none: an idle position moves along).
func (s *binlogStream) emit(ctx context.Context) error {
	p := s.st.current()
	if err := s.tr.SetBinlog(p); err != nil {
		return err
	}
	now := s.r.cfg.Now()
	// Holes given up are dead-lettered as in poll mode, also on MariaDB,
	// where the binlog still relays a late row: the poll fallback after a
	// switch would not wait for it, and the record is its only trace.
	s.pending.abandoned = append(s.pending.abandoned, s.tr.Expire(now)...)
	b := newBatch(s.tr, s.pending.rows, s.pending.abandoned, s.pending.started, s.pending.bytes)
	if err := s.r.send(ctx, s.out, b); err != nil {
		return err
	}
	s.pending = binlogBatch{started: s.pending.started}
	s.emitted, s.lastEmit, s.heartbeat = p, now, false
	return nil
}

// purged turns the server's refusal to stream from pos into a
// *BinlogPurgedError (roomflow_relay_binlog_purged = 1) when it means the
// binlog is gone (ER_MASTER_FATAL_ERROR_READING_BINLOG, 1236); other
// errors are returned as they are.
func (r *Relay) purged(pos BinlogPosition, err error) error {
	var me *gomysql.MyError
	if errors.As(err, &me) && me.Code == 1236 {
		r.m.binlogPurged.Set(1)
		return &BinlogPurgedError{Position: pos, Err: err}
	}
	return fmt.Errorf("relay: binlog stream: %w", err)
}
