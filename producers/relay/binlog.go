package relay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/go-sql-driver/mysql"
)

// BinlogCheckError is returned at the start of a binlog-mode leader session
// when the server is not set up for it; Problems names each missing
// setting or grant.
type BinlogCheckError struct {
	Problems []string
}

func (e *BinlogCheckError) Error() string {
	return "relay: binlog mode: the MySQL server is not ready: " + strings.Join(e.Problems, "; ")
}

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
	at := e.Position.GTIDSet
	if at == "" {
		at = e.Position.File + ":" + strconv.FormatUint(e.Position.Offset, 10)
	}
	return fmt.Sprintf("relay: the binlog at the stored position %s is gone (purged, or another server after a failover): %v; run `roomflow relay --resnapshot` to snapshot the table again", at, e.Err)
}

func (e *BinlogPurgedError) Unwrap() error { return e.Err }

// binlogServer is what the start-up checks learnt about the server.
type binlogServer struct {
	flavor string // FlavorMariaDB or FlavorMySQL
	schema string // the DSN's database, where Table lives
	dsn    *mysql.Config
}

// ReplicaHost is the host name the relay registers with as a replica
// (SHOW SLAVE HOSTS): a registration of relay.binlog.server_id under this
// name is one of the relay's own replicas (a leader's, or an ex-leader's
// not yet dropped), under any other name a conflict.
const ReplicaHost = "roomflow-relay"

// serverIdentity tells two servers apart: server id, host name and port
// as the server itself reports them (a proxy in between changes neither).
const serverIdentity = "CONCAT(@@server_id, '@', @@hostname, ':', @@port)"

// checkBinlogServer runs binlog mode's start-up checks on a connection of
// binlog.dsn, the user that streams: binary log on, binlog_format=ROW,
// binlog_row_image=FULL, the replication privileges (its own or its
// enabled roles') and a server id that neither the server nor another
// registered replica uses. Every problem found is named in one
// *BinlogCheckError.
func (r *Relay) checkBinlogServer(ctx context.Context) (*binlogServer, error) {
	dc, err := mysql.ParseDSN(r.cfg.Binlog.DSN)
	if err != nil {
		return nil, errors.New("relay: binlog.dsn does not parse") // never the DSN: it holds the password
	}
	rc := dc.Clone()
	rc.DBName = "" // a replication user need not see the table's database
	conn, err := mysql.NewConnector(rc)
	if err != nil {
		return nil, errors.New("relay: binlog.dsn does not parse")
	}
	repl := sql.OpenDB(conn)
	defer repl.Close()
	s := &binlogServer{dsn: dc, flavor: FlavorMySQL}
	var tableServer string
	if err := r.db.QueryRowContext(ctx, "SELECT DATABASE(), "+serverIdentity).Scan(&s.schema, &tableServer); err != nil {
		return nil, fmt.Errorf("relay: binlog mode: the table's database: %w", err)
	}
	var logBin, format, image, version, server string
	var serverID uint64
	if err := repl.QueryRowContext(ctx, "SELECT @@log_bin, @@binlog_format, @@binlog_row_image, @@server_id, VERSION(), "+serverIdentity).
		Scan(&logBin, &format, &image, &serverID, &version, &server); err != nil {
		return nil, fmt.Errorf("relay: binlog settings: %w", err)
	}
	if strings.Contains(strings.ToLower(version), "mariadb") {
		s.flavor = FlavorMariaDB
	}
	var problems []string
	if logBin != "1" && !strings.EqualFold(logBin, "ON") {
		problems = append(problems, "the binary log is off (set log_bin)")
	}
	if !strings.EqualFold(format, "ROW") {
		problems = append(problems, fmt.Sprintf("binlog_format is %s, must be ROW", format))
	}
	if !strings.EqualFold(image, "FULL") {
		problems = append(problems, fmt.Sprintf("binlog_row_image is %s, must be FULL", image))
	}
	if s.flavor == FlavorMySQL {
		problems = append(problems, mysqlProblems(ctx, repl)...)
	}
	if serverID == uint64(r.cfg.Binlog.ServerID) {
		problems = append(problems, fmt.Sprintf("relay.binlog.server_id %d is the server's own server_id; pick one no replica or binlog client of it uses", serverID))
	}
	if server != tableServer {
		// The snapshot's position must be a place in the streamed binlog.
		problems = append(problems, fmt.Sprintf("binlog.dsn reaches server %s, the relay's database server %s: both must be the same server", server, tableServer))
	}
	missing, err := missingPrivileges(ctx, repl, s.flavor)
	if err != nil {
		return nil, err
	}
	problems = append(problems, missing...)
	conflict, err := r.serverIDConflict(ctx, repl)
	if err != nil {
		return nil, err
	}
	if conflict != "" {
		problems = append(problems, conflict)
	}
	if len(problems) > 0 {
		return nil, &BinlogCheckError{Problems: problems}
	}
	return s, nil
}

// mysqlProblems names what MySQL needs besides the common settings: GTIDs
// (without them the snapshot has no binlog position to start from without
// a global lock) and uncompressed transactions (compressed ones carry
// their rows inside a payload event the relay does not open).
func mysqlProblems(ctx context.Context, db *sql.DB) []string {
	var mode, compression string
	if err := db.QueryRowContext(ctx, "SELECT @@gtid_mode").Scan(&mode); err != nil {
		return []string{fmt.Sprintf("gtid_mode cannot be read: %v", err)}
	}
	err := db.QueryRowContext(ctx, "SELECT @@binlog_transaction_compression").Scan(&compression)
	var me *mysql.MySQLError
	if err != nil && !(errors.As(err, &me) && me.Number == 1193) { // 1193: before 8.0.20, no compression
		return []string{fmt.Sprintf("binlog_transaction_compression cannot be read: %v", err)}
	}
	var problems []string
	if !strings.EqualFold(mode, "ON") {
		problems = append(problems, fmt.Sprintf("gtid_mode is %s, must be ON (with enforce_gtid_consistency=ON)", mode))
	}
	if compression == "1" || strings.EqualFold(compression, "ON") {
		problems = append(problems, "binlog_transaction_compression is ON, must be OFF")
	}
	return problems
}

// missingPrivileges names the replication privileges the user lacks.
// MariaDB's SHOW GRANTS includes the grants of the roles enabled at login
// (the default role and the roles granted to it); a role granted but not
// enabled gives the stream nothing, and the message says so. MySQL's
// needs USING with the active roles to show theirs.
func missingPrivileges(ctx context.Context, db *sql.DB, flavor string) ([]string, error) {
	var using string
	if flavor == FlavorMySQL {
		var roles sql.NullString
		if err := db.QueryRowContext(ctx, "SELECT CURRENT_ROLE()").Scan(&roles); err != nil {
			return nil, fmt.Errorf("relay: binlog mode: CURRENT_ROLE(): %w", err)
		}
		if roles.Valid && roles.String != "" && !strings.EqualFold(roles.String, "NONE") {
			using = " FOR CURRENT_USER() USING " + roles.String // the server's own quoting
		}
	}
	grants, err := queryStrings(ctx, db, "SHOW GRANTS"+using)
	if err != nil {
		return nil, fmt.Errorf("relay: binlog mode: SHOW GRANTS: %w", err)
	}
	text := strings.ToUpper(strings.Join(grants, "\n"))
	client := "REPLICATION CLIENT"
	if flavor == FlavorMariaDB {
		client = "BINLOG MONITOR"
	}
	all := strings.Contains(text, "ALL PRIVILEGES ON *.*")
	var missing []string
	if !all && !strings.Contains(text, "REPLICATION SLAVE") {
		missing = append(missing, "the user lacks REPLICATION SLAVE (GRANT REPLICATION SLAVE ON *.*)")
	}
	if !all && !strings.Contains(text, client) && !strings.Contains(text, "SUPER") {
		missing = append(missing, fmt.Sprintf("the user lacks %s (GRANT %s ON *.*)", client, client))
	}
	if len(missing) == 0 || flavor != FlavorMariaDB {
		return missing, nil
	}
	idle, err := queryStrings(ctx, db, "SELECT ROLE_NAME FROM information_schema.APPLICABLE_ROLES WHERE ROLE_NAME NOT IN (SELECT ROLE_NAME FROM information_schema.ENABLED_ROLES WHERE ROLE_NAME IS NOT NULL)")
	if err != nil {
		return nil, fmt.Errorf("relay: binlog mode: roles: %w", err)
	}
	if len(idle) > 0 {
		missing = append(missing, fmt.Sprintf("roles granted but not enabled at login do not count (%s): make one the default role (SET DEFAULT ROLE <role> FOR <user>)", strings.Join(idle, ", ")))
	}
	return missing, nil
}

// serverIDConflict names a replica registered with relay.binlog.server_id
// under another host name than ReplicaHost (SHOW SLAVE HOSTS; such a
// client's stream and the relay's would drop each other). Binlog clients
// that do not register are not listed, so not found. On MariaDB the list
// needs REPLICATION MASTER ADMIN, which binlog mode does not require:
// without it the check is skipped with a warning.
func (r *Relay) serverIDConflict(ctx context.Context, db *sql.DB) (string, error) {
	rs, err := db.QueryContext(ctx, "SHOW SLAVE HOSTS")
	if err != nil {
		var me *mysql.MySQLError
		if errors.As(err, &me) && (me.Number == 1227 || me.Number == 1045) {
			r.log.Warn("relay.binlog.server_id cannot be checked against other replicas: SHOW SLAVE HOSTS needs REPLICATION MASTER ADMIN (MariaDB) or REPLICATION SLAVE (MySQL)",
				"server_id", r.cfg.Binlog.ServerID)
			return "", nil
		}
		return "", fmt.Errorf("relay: binlog mode: SHOW SLAVE HOSTS: %w", err)
	}
	defer rs.Close()
	names, err := rs.Columns()
	if err != nil {
		return "", fmt.Errorf("relay: binlog mode: SHOW SLAVE HOSTS: %w", err)
	}
	var conflict string
	for rs.Next() {
		cols := make([]sql.NullString, len(names))
		ptrs := make([]any, len(cols))
		for i := range cols {
			ptrs[i] = &cols[i]
		}
		if err := rs.Scan(ptrs...); err != nil {
			return "", fmt.Errorf("relay: binlog mode: SHOW SLAVE HOSTS: %w", err)
		}
		var id, host, port string
		for i, n := range names {
			switch strings.ToLower(n) {
			case "server_id":
				id = cols[i].String
			case "host":
				host = cols[i].String
			case "port":
				port = cols[i].String
			}
		}
		if id == strconv.FormatUint(uint64(r.cfg.Binlog.ServerID), 10) && host != ReplicaHost {
			conflict = fmt.Sprintf("relay.binlog.server_id %s is used by another replica or binlog client of the server (registered as host %q, port %s); pick an id no other replica uses", id, host, port)
		}
	}
	return conflict, rs.Err()
}

// queryStrings is the first column of each row of query.
func queryStrings(ctx context.Context, db *sql.DB, query string) ([]string, error) {
	rs, err := db.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []string
	for rs.Next() {
		var v string
		if err := rs.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rs.Err()
}

// outboxColumns are the columns a relayed row needs, in Row's order.
var outboxColumns = []string{"id", "app_code", "event_id", "event_type", "room_id", "room_version", "payload", "occurred_at_ms"}

// columnMap is the ordinal of each of outboxColumns in the table's rows
// as the binlog carries them.
type columnMap struct {
	tableID uint64
	count   uint64
	ord     [8]int
}

// loadColumns reads the table's column ordinals from information_schema.
// It is called for the first TABLE_MAP of the table and whenever one
// differs from the last (a new table id or column count: an ALTER TABLE);
// a needed column that is gone stops the relay with an error naming it.
func (r *Relay) loadColumns(ctx context.Context, schema string, tm *replication.TableMapEvent) (columnMap, error) {
	rs, err := r.db.QueryContext(ctx, "SELECT COLUMN_NAME, ORDINAL_POSITION FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?", schema, r.cfg.Table)
	if err != nil {
		return columnMap{}, fmt.Errorf("relay: columns of %s: %w", r.cfg.Table, err)
	}
	defer rs.Close()
	pos := map[string]int{}
	for rs.Next() {
		var name string
		var ord int
		if err := rs.Scan(&name, &ord); err != nil {
			return columnMap{}, fmt.Errorf("relay: columns of %s: %w", r.cfg.Table, err)
		}
		pos[strings.ToLower(name)] = ord - 1
	}
	if err := rs.Err(); err != nil {
		return columnMap{}, fmt.Errorf("relay: columns of %s: %w", r.cfg.Table, err)
	}
	m := columnMap{tableID: tm.TableID, count: tm.ColumnCount}
	for i, c := range outboxColumns {
		o, ok := pos[c]
		if !ok || uint64(o) >= tm.ColumnCount {
			return columnMap{}, fmt.Errorf("relay: %s.%s has no column %s any more (schema change?): binlog rows cannot be relayed", schema, r.cfg.Table, c)
		}
		m.ord[i] = o
	}
	if uint64(len(pos)) != tm.ColumnCount {
		return columnMap{}, fmt.Errorf("relay: %s.%s has %d columns in information_schema but %d in the binlog (a schema change after these rows was written?)", schema, r.cfg.Table, len(pos), tm.ColumnCount)
	}
	return m, nil
}

// binlogRow builds a Row from a binlog row image.
func binlogRow(m *columnMap, v []any) (Row, error) {
	var row Row
	var err error
	get := func(i int) any { return v[m.ord[i]] }
	if row.ID, err = asUint(get(0)); err != nil {
		return Row{}, fmt.Errorf("id: %w", err)
	}
	row.AppCode, row.EventID, row.EventType, row.RoomID = asString(get(1)), asString(get(2)), asString(get(3)), asString(get(4))
	rv, err := asUint(get(5))
	if err != nil {
		return Row{}, fmt.Errorf("room_version: %w", err)
	}
	row.RoomVersion = int64(rv)
	switch p := get(6).(type) {
	case []byte:
		row.Payload = p
	case string:
		row.Payload = []byte(p)
	}
	row.PayloadBytes = len(row.Payload)
	occ, err := asUint(get(7))
	if err != nil {
		return Row{}, fmt.Errorf("occurred_at_ms: %w", err)
	}
	row.OccurredAtMs = int64(occ)
	return row, nil
}

func asUint(v any) (uint64, error) {
	switch x := v.(type) {
	case int64:
		return uint64(x), nil
	case uint64:
		return x, nil
	case int32:
		return uint64(x), nil
	case uint32:
		return uint64(x), nil
	case int:
		return uint64(x), nil
	case nil:
		return 0, errors.New("NULL")
	}
	return 0, fmt.Errorf("unexpected %T", v)
}

func asString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return string(x)
	}
	return ""
}

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

// streamState is where the binlog stream is: the GTID set and file/offset
// after the last complete transaction, and the transaction in progress.
type streamState struct {
	flavor string
	gset   gomysql.GTIDSet // *MariadbGTIDSet or *MysqlGTIDSet; nil: file/offset only
	file   string
	offset uint64

	inTxn      bool
	opened     bool // the open transaction's GTID event was seen in this stream
	standalone bool // it ends with its first query (DDL), not at an XID or COMMIT
	gtid       gomysql.MariadbGTID
	mysqlGTID  *gomysql.MysqlGTIDSet // MySQL: the open transaction's GTID; nil when anonymous
	start      BinlogPosition        // the position before the open transaction
	rows       uint64                // relay-table insert rows of the open transaction seen so far
	skip       uint64                // rows of the first transaction relayed before and not seen yet
}

// newStreamState is the state of a stream starting at pos; it fails on a
// GTID set that does not parse.
func newStreamState(flavor string, pos BinlogPosition) (*streamState, error) {
	st := &streamState{flavor: flavor, file: pos.File, offset: pos.Offset, skip: pos.Rows}
	switch {
	case flavor == FlavorMySQL && (pos.GTIDSet != "" || pos.File == ""):
		gs, err := gomysql.ParseMysqlGTIDSet(pos.GTIDSet)
		if err != nil {
			return nil, fmt.Errorf("relay: stored GTID set %q: %w", pos.GTIDSet, err)
		}
		st.gset = gs
	case flavor == FlavorMariaDB && (pos.GTIDSet != "" || pos.File == ""):
		gs, err := gomysql.ParseMariadbGTIDSet(pos.GTIDSet)
		if err != nil {
			return nil, fmt.Errorf("relay: stored GTID set %q: %w", pos.GTIDSet, err)
		}
		st.gset = lastPerDomain(gs.(*gomysql.MariadbGTIDSet))
	}
	if pos.Rows > 0 {
		// Inside a transaction already: until its events arrive, the
		// position to store is still its start plus the rows done, never
		// its start alone (that would relay those rows again).
		st.inTxn, st.start = true, pos
		st.start.Rows = 0
	}
	return st, nil
}

func (s *streamState) done() BinlogPosition {
	p := BinlogPosition{Flavor: s.flavor, File: s.file, Offset: s.offset}
	if s.gset != nil {
		p.GTIDSet = s.gset.String()
	}
	return p
}

// current is the position to store now: between transactions the done
// position, inside one its start plus the rows of it relayed.
func (s *streamState) current() BinlogPosition {
	if s.inTxn {
		// Rows still to skip were relayed before: they count as done
		// even before their events arrive.
		p := s.start
		p.Rows = s.rows + s.skip
		return p
	}
	return s.done()
}

func (s *streamState) begin() {
	s.inTxn, s.start, s.rows = true, s.done(), 0
}

// commit ends the open transaction. Its GTID replaces its domain's in the
// set: a MariaDB GTID position holds the last GTID of each domain, whatever
// server wrote it (after a failover the new primary's server id), and a
// connect state with two GTIDs of one domain is refused.
func (s *streamState) commit() {
	switch gs := s.gset.(type) {
	case *gomysql.MariadbGTIDSet:
		if g := s.gtid; g.SequenceNumber > 0 {
			gs.Sets[g.DomainID] = map[uint32]*gomysql.MariadbGTID{g.ServerID: &g}
		}
	case *gomysql.MysqlGTIDSet:
		if s.mysqlGTID != nil {
			_ = gs.Add(*s.mysqlGTID) // adding never fails
		}
	}
	s.inTxn, s.opened, s.standalone, s.rows, s.skip, s.mysqlGTID = false, false, false, 0, 0, nil
}

// open starts the transaction of a GTID event; a transaction still open
// ended before it (only committed transactions reach the binlog: one
// whose end event was not recognised, such as XA, ended here). A
// transaction resumed inside (Rows) is not open until its GTID event.
func (s *streamState) open() {
	if s.inTxn && s.opened {
		s.commit()
	}
	s.begin()
	s.opened = true
}

// lastPerDomain keeps the GTID with the highest sequence number of each
// domain: a position stored by an earlier relay version after a failover
// can hold several.
func lastPerDomain(gs *gomysql.MariadbGTIDSet) *gomysql.MariadbGTIDSet {
	for d, byServer := range gs.Sets {
		var last *gomysql.MariadbGTID
		for _, g := range byServer {
			if last == nil || g.SequenceNumber > last.SequenceNumber {
				last = g
			}
		}
		gs.Sets[d] = map[uint32]*gomysql.MariadbGTID{last.ServerID: last}
	}
	return gs
}

// readBinlog is binlog mode's read: the snapshot first when the position
// has none (first start, a switch from poll mode, --resnapshot), then the
// binlog from the position, into the same batches the poll read makes.
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
		r.resnapshot.Store(false)
	}
	return r.stream(ctx, tr, srv, pos, out)
}

// eventFunc is a replication.EventHandler.
type eventFunc func(*replication.BinlogEvent) error

func (f eventFunc) HandleEvent(e *replication.BinlogEvent) error { return f(e) }

// binlogEvent is an event or the error that ended the stream.
type binlogEvent struct {
	ev  *replication.BinlogEvent
	err error
}

// stream relays the binlog from pos until ctx ends or the stream fails.
func (r *Relay) stream(ctx context.Context, tr *Tracker, srv *binlogServer, pos BinlogPosition, out chan<- *batch) error {
	table := []byte(r.cfg.Table)
	schema := []byte(srv.schema)
	ours := func(tm *replication.TableMapEvent) bool {
		return tm != nil && string(tm.Table) == string(table) && string(tm.Schema) == string(schema)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The syncer's reading goroutine hands each parsed event to the
	// batcher below through evs: a few events (each at most one row image
	// more than binlog_row_event_max_size) ahead of it; a slow commit slows
	// the read.
	evs := make(chan binlogEvent, 8)
	syncer, err := r.binlogSyncer(srv, func(e *replication.RowsEvent) bool {
		return e.Type() == replication.EnumRowsEventTypeInsert && ours(e.Table)
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
	var streamer *replication.BinlogStreamer
	if st.gset != nil {
		streamer, err = syncer.StartSyncGTID(st.gset.Clone())
		if err != nil {
			return r.purged(pos, err)
		}
	} else {
		streamer, err = syncer.StartSync(gomysql.Position{Name: pos.File, Pos: uint32(pos.Offset)})
		if err != nil {
			return r.purged(pos, err)
		}
	}
	r.m.binlogPurged.Set(0)
	r.log.Info("streaming the binlog", "gtid_set", pos.GTIDSet, "file", pos.File, "offset", pos.Offset, "rows_done", pos.Rows)

	go func() {
		// With a synchronous handler the streamer carries only the error
		// that ended the stream.
		_, err := streamer.GetEvent(sctx)
		if err == nil {
			err = errors.New("relay: binlog stream: unexpected event outside the handler")
		}
		select {
		case evs <- binlogEvent{err: err}:
		case <-sctx.Done():
		}
	}()

	var cols columnMap
	var pending []Row
	var pendingBytes int
	started := r.cfg.Now()
	lastEmit := started
	emitted := pos
	heartbeat := false
	// On MySQL the snapshot overlaps the binlog (see snapshot): a row at or
	// below the high-water id that is not an open gap was relayed, and
	// gaps given up are dead-lettered, as in poll mode. On MariaDB the
	// gaps are the poll fallback's only and the binlog decides.
	byID := srv.flavor == FlavorMySQL
	var abandoned []Abandoned
	emit := func() error {
		p := st.current()
		if err := tr.SetBinlog(p); err != nil {
			return err
		}
		now := r.cfg.Now()
		if expired := tr.Expire(now); byID {
			abandoned = append(abandoned, expired...)
		}
		b := &batch{rows: pending, abandoned: abandoned, started: started}
		b.pos = tr.Encode()
		b.info = BatchInfo{Rows: len(pending), High: tr.High(), OpenGaps: tr.OpenHoles(), ReadBytes: pendingBytes}
		for _, a := range abandoned {
			b.info.Abandoned += a.Count()
		}
		if n := len(pending); n > 0 {
			b.info.FirstID, b.info.LastID = pending[0].ID, pending[n-1].ID
		}
		r.m.batchBytes.Observe(float64(pendingBytes))
		select {
		case out <- b:
		case <-ctx.Done():
			return ctx.Err()
		}
		pending, pendingBytes, abandoned, emitted, lastEmit, heartbeat = nil, 0, nil, p, now, false
		return nil
	}
	for {
		var e binlogEvent
		var ok bool
		select {
		case e, ok = <-evs:
		default:
			// Nothing queued: relay what is pending now (latency), or
			// move an idle position along on the heartbeat's clock. While
			// the committer still has a batch waiting, keep filling this
			// one instead: under load batches grow towards BatchSize.
			due := len(pending) > 0 || (heartbeat && st.current() != emitted) ||
				(st.current() != emitted && r.cfg.Now().Sub(lastEmit) >= r.cfg.Binlog.HeartbeatPeriod)
			if due && len(out) == 0 {
				if err := emit(); err != nil {
					return err
				}
				due = false
			}
			var recheck <-chan time.Time
			if due {
				recheck = time.After(time.Millisecond)
			}
			select {
			case e, ok = <-evs:
			case <-recheck:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if !ok {
			return ctx.Err()
		}
		if e.err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return r.purged(emitted, e.err)
		}
		if len(pending) == 0 {
			started = r.cfg.Now()
		}
		h := e.ev.Header
		switch ev := e.ev.Event.(type) {
		case *replication.RotateEvent:
			st.file, st.offset = string(ev.NextLogName), ev.Position
			continue
		case *replication.MariadbGTIDEvent:
			st.open()
			st.gtid, st.standalone = ev.GTID, ev.IsStandalone()
		case *replication.GTIDEvent:
			// MySQL: a DML transaction goes on with a BEGIN query, DDL is
			// the one query after the GTID event.
			st.open()
			st.standalone = true
			if ev.GNO > 0 { // 0: an anonymous transaction (gtid_mode OFF)
				next, err := ev.GTIDNext()
				if err != nil {
					return fmt.Errorf("relay: binlog GTID event: %w", err)
				}
				st.mysqlGTID = next.(*gomysql.MysqlGTIDSet)
			}
		case *replication.XIDEvent:
			st.offset = uint64(h.LogPos)
			st.commit()
		case *replication.QueryEvent:
			st.offset = uint64(h.LogPos)
			q := strings.ToUpper(strings.TrimSpace(string(ev.Query)))
			if q == "BEGIN" {
				st.standalone = false
				break
			}
			if st.inTxn && (st.standalone || q == "COMMIT" || q == "ROLLBACK") {
				st.commit()
			}
		case *replication.TableMapEvent:
			if ours(ev) && (ev.TableID != cols.tableID || ev.ColumnCount != cols.count) {
				if cols, err = r.loadColumns(ctx, srv.schema, ev); err != nil {
					return err
				}
			}
		case *replication.RowsEvent:
			if ev.Type() == replication.EnumRowsEventTypeInsert && ours(ev.Table) {
				if ev.TableID != cols.tableID {
					return fmt.Errorf("relay: binlog rows of table id %d without its TABLE_MAP", ev.TableID)
				}
				now := r.cfg.Now()
				for _, v := range ev.Rows {
					if st.skip > 0 {
						st.rows++
						st.skip-- // relayed before a crash or a leader change
						continue
					}
					row, err := binlogRow(&cols, v)
					if err != nil {
						return fmt.Errorf("relay: binlog row of %s: %w", r.cfg.Table, err)
					}
					if byID && row.ID <= tr.High() && !tr.IsOpen(row.ID) {
						// In the snapshot, or a gap given up; or an id
						// reissued (AUTO_INCREMENT reset), which stops as
						// in poll mode instead of being dropped.
						if err := r.checkReissue(ctx, tr.High()); err != nil {
							return err
						}
						st.rows++
						continue
					}
					if r.tooLarge(&row) {
						row.Payload = nil // dead-lettered by size: not held
					}
					// A row that would take the batch past max_batch_bytes
					// starts the next one (as poll mode's Budget does); the
					// position emitted does not count it yet.
					if len(pending) > 0 && pendingBytes+len(row.Payload) > r.cfg.MaxBatchBytes {
						if err := emit(); err != nil {
							return err
						}
					}
					st.rows++
					if row.ID > tr.High() {
						evicted, err := tr.Advance([]uint64{row.ID}, now)
						if err != nil {
							return err
						}
						if byID {
							abandoned = append(abandoned, evicted...)
						}
					} else {
						tr.Fill([]uint64{row.ID})
					}
					pending = append(pending, row)
					pendingBytes += len(row.Payload)
					if len(pending) >= r.cfg.BatchSize || pendingBytes >= r.cfg.MaxBatchBytes {
						if err := emit(); err != nil {
							return err
						}
					}
				}
			}
		case *replication.GenericEvent:
			if h.EventType == replication.HEARTBEAT_EVENT || h.EventType == replication.HEARTBEAT_LOG_EVENT_V2 {
				heartbeat = true
				continue // a heartbeat's LogPos is the server's, not a stream position
			}
		}
		if h.LogPos > 0 && !st.inTxn {
			st.offset = uint64(h.LogPos)
		}
	}
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
			b := &batch{rows: rows, started: started, pos: tr.Encode()}
			b.info = BatchInfo{Rows: len(rows), High: tr.High(), OpenGaps: tr.OpenHoles(), ReadBytes: inline + fetched}
			r.m.batchBytes.Observe(float64(b.info.ReadBytes))
			if n := len(rows); n > 0 {
				b.info.FirstID, b.info.LastID = rows[0].ID, rows[n-1].ID
			}
			select {
			case out <- b:
			case <-ctx.Done():
				return BinlogPosition{}, ctx.Err()
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
