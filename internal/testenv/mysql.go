package testenv

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/hyapp/roomflow/internal/mysqlx"
)

// MySQL is a database of its own for one test, migrated.
type MySQL struct {
	DB   *sql.DB
	DSN  string // DSN of the test database
	Name string // database name
}

// ServerDSN is the server tests run against, without a database.
func ServerDSN() string {
	if v := os.Getenv("ROOMFLOW_TEST_MYSQL_DSN"); v != "" {
		return v
	}
	return "root@tcp(127.0.0.1:3306)/"
}

// NewMySQL creates a fresh database with migrations applied; it is dropped
// when the test ends. Fails the test if the server is unreachable.
func NewMySQL(t testing.TB) *MySQL { return newMySQL(t, ServerDSN(), true) }

// NewEmptyMySQL creates a fresh database without migrations.
func NewEmptyMySQL(t testing.TB) *MySQL { return newMySQL(t, ServerDSN(), false) }

// NewMySQLOn is NewMySQL on another server, serverDSN (root, no
// database), such as a throwaway tempmariadb one with the row binlog.
func NewMySQLOn(t testing.TB, serverDSN string) *MySQL { return newMySQL(t, serverDSN, true) }

func newMySQL(t testing.TB, serverDSN string, migrated bool) *MySQL {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := mysqlx.NewScratch(ctx, serverDSN, UniqueName(t), migrated)
	if err != nil {
		t.Fatalf("testenv: MySQL is required (set ROOMFLOW_TEST_MYSQL_DSN): %v", err)
	}
	db, err := sql.Open("mysql", s.DSN)
	if err != nil {
		t.Fatalf("testenv: mysql: %v", err)
	}
	db.SetMaxOpenConns(32)
	db.SetMaxIdleConns(32)
	t.Cleanup(func() {
		db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.Drop(ctx); err != nil {
			t.Logf("testenv: drop database %s: %v", s.Name, err)
		}
	})
	return &MySQL{DB: db, DSN: s.DSN, Name: s.Name}
}

// OwnUser creates a MySQL user of its own with every right on m's
// database (dropped when the test ends) and returns a DSN connecting as it
// and its name. A test hands that DSN to the client under test, so it can
// find that client's connections in information_schema.PROCESSLIST by
// user and kill them (KILL CONNECTION) without touching its own.
func (m *MySQL) OwnUser(t testing.TB) (dsn, user string) {
	t.Helper()
	user = "rf" + strings.TrimPrefix(UniqueName(t), "t_")
	if len(user) > 32 {
		user = user[len(user)-32:]
	}
	ctx := context.Background()
	for _, q := range []string{
		"CREATE USER '" + user + "'@'%' IDENTIFIED BY 'own'",
		"GRANT ALL ON `" + m.Name + "`.* TO '" + user + "'@'%'",
	} {
		if _, err := m.DB.ExecContext(ctx, q); err != nil {
			t.Fatalf("testenv: %s: %v", q, err)
		}
	}
	t.Cleanup(func() { _, _ = m.DB.ExecContext(context.Background(), "DROP USER IF EXISTS '"+user+"'@'%'") })
	dc, err := mysql.ParseDSN(m.DSN)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	dc.User, dc.Passwd = user, "own"
	return dc.FormatDSN(), user
}

// KillBinlogDumps ends every binlog stream of db's server (KILL of each
// thread whose COMMAND is Binlog Dump), as a server restart or a cut
// network would, and returns how many it ended. db needs the rights to
// see and kill other users' threads (root). A thread that ended meanwhile
// is not an error.
func KillBinlogDumps(ctx context.Context, db *sql.DB) (int, error) {
	rs, err := db.QueryContext(ctx, "SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'")
	if err != nil {
		return 0, err
	}
	var ids []int64
	for rs.Next() {
		var id int64
		if err := rs.Scan(&id); err != nil {
			rs.Close()
			return 0, err
		}
		ids = append(ids, id)
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return 0, err
	}
	for _, id := range ids {
		// 1094: unknown thread id, the stream ended by itself meanwhile.
		if _, err := db.ExecContext(ctx, fmt.Sprintf("KILL %d", id)); err != nil && !strings.Contains(err.Error(), "1094") {
			return 0, err
		}
	}
	return len(ids), nil
}
