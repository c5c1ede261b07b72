package tempmariadb

import (
	"context"
	"database/sql"
	"os"
	"strconv"
	"testing"
	"time"
)

// TestStartBinlog starts a server with the row binlog on and checks the
// settings the relay's binlog mode needs, that grant tables are in force
// (a user without privileges is refused), and that Stop removes the
// directory.
func TestStartBinlog(t *testing.T) {
	ctx, s, db := start(t, Options{Binlog: true, ServerID: 7})
	var logBin, format, image, metadata, strict string
	var serverID int
	if err := db.QueryRowContext(ctx, "SELECT @@log_bin, @@binlog_format, @@binlog_row_image, @@binlog_row_metadata, @@gtid_strict_mode, @@server_id").
		Scan(&logBin, &format, &image, &metadata, &strict, &serverID); err != nil {
		t.Fatal(err)
	}
	if logBin != "1" || format != "ROW" || image != "FULL" || metadata != "FULL" || strict != "0" || serverID != 7 {
		t.Fatalf("log_bin=%s binlog_format=%s binlog_row_image=%s binlog_row_metadata=%s gtid_strict_mode=%s server_id=%d", logBin, format, image, metadata, strict, serverID)
	}
	if _, err := db.ExecContext(ctx, "CREATE USER 'weak'@'127.0.0.1'"); err != nil {
		t.Fatal(err)
	}
	weak, err := sql.Open("mysql", "weak@tcp(127.0.0.1:"+itoa(s.Port)+")/")
	if err != nil {
		t.Fatal(err)
	}
	defer weak.Close()
	if _, err := weak.ExecContext(ctx, "CREATE DATABASE x"); err == nil {
		t.Fatal("a user without privileges created a database: grant tables not in force")
	}
	dir := s.Dir
	s.Stop()
	s.Stop()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("directory %s left behind: %v", dir, err)
	}
}

// TestStartNoBinlog checks the default server has the binary log off.
func TestStartNoBinlog(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a mariadbd")
	}
	ctx, _, db := start(t, Options{BufferPool: "64M"})
	var logBin string
	var pool int64
	if err := db.QueryRowContext(ctx, "SELECT @@log_bin, @@innodb_buffer_pool_size").Scan(&logBin, &pool); err != nil {
		t.Fatal(err)
	}
	if logBin != "0" || pool != 64<<20 {
		t.Fatalf("log_bin=%s innodb_buffer_pool_size=%d", logBin, pool)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// start starts a server for t, stopped (with its handle closed) when t
// ends.
func start(t *testing.T, o Options) (context.Context, *Server, *sql.DB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	s, err := Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	db, err := sql.Open("mysql", s.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return ctx, s, db
}
