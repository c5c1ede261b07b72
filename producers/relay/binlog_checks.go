package relay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

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
// binlog_row_image=FULL, binlog_row_metadata=FULL, the replication
// privileges (its own or its enabled roles') and a server id that neither
// the server nor another registered replica uses. Every problem found is
// named in one *BinlogCheckError.
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
	metadata, err := rowMetadataProblem(ctx, repl, version)
	if err != nil {
		return nil, err
	}
	if metadata != "" {
		problems = append(problems, metadata)
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

// rowMetadataProblem names binlog_row_metadata unless it is FULL: only
// then does each TABLE_MAP name its columns, so that rows written before
// an ALTER TABLE are decoded with the columns they had (tableColumns).
// MySQL before 8.0.1 and MariaDB before 10.5 have no such variable.
func rowMetadataProblem(ctx context.Context, db *sql.DB, version string) (string, error) {
	var v string
	err := db.QueryRowContext(ctx, "SELECT @@binlog_row_metadata").Scan(&v)
	var me *mysql.MySQLError
	switch {
	case errors.As(err, &me) && me.Number == 1193: // unknown system variable
		return fmt.Sprintf("the server (%s) has no binlog_row_metadata: binlog mode needs MySQL 8.0.1+ or MariaDB 10.5+", version), nil
	case err != nil:
		return "", fmt.Errorf("relay: binlog settings: %w", err)
	case !strings.EqualFold(v, "FULL"):
		return fmt.Sprintf("binlog_row_metadata is %s, must be FULL (SET GLOBAL binlog_row_metadata=FULL, and binlog_row_metadata=FULL in the server's configuration)", v), nil
	}
	return "", nil
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
