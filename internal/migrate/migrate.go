// Package migrate applies roomflow's numbered MySQL migrations
// (schemas/mysql/migrations) exactly once each.
//
// Safe to run on every deploy and from several processes at once: a named
// lock (GET_LOCK, which MySQL 8.0 and MariaDB share) serialises runners, and
// schema_migrations records what was applied with a checksum, so an edited
// released migration is reported instead of silently skipped. MySQL DDL is
// not transactional; a runner that died between a DDL statement and its
// record re-runs the file, so statements are written to be re-runnable
// (CREATE ... IF NOT EXISTS) and duplicate-column/index errors are tolerated.
package migrate

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	schema "github.com/hyapp/roomflow/schemas/mysql"
)

const lockName = "roomflow_migrate"

// Migration is one numbered file.
type Migration struct {
	Version  int
	Name     string
	SQL      string
	Checksum string
}

// ChecksumError means a migration already applied has different text now.
type ChecksumError struct {
	Version        int
	Name           string
	Applied, Found string
}

func (e *ChecksumError) Error() string {
	return fmt.Sprintf("migrate: %04d_%s was applied with checksum %s but the file now has %s; released migrations must not change",
		e.Version, e.Name, e.Applied[:12], e.Found[:12])
}

// Load reads the embedded migrations in version order.
func Load() ([]Migration, error) { return LoadFS(schema.Migrations, "migrations") }

// LoadFS reads NNNN_name.sql files from dir of fsys.
func LoadFS(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	var out []Migration
	seen := map[int]string{}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".sql") {
			continue
		}
		num, rest, ok := strings.Cut(strings.TrimSuffix(name, ".sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migrate: %s: want NNNN_name.sql", name)
		}
		if prev, dup := seen[v]; dup {
			return nil, fmt.Errorf("migrate: %s and %s share version %d", prev, name, v)
		}
		seen[v] = name
		raw, err := fs.ReadFile(fsys, dir+"/"+name)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(raw)
		out = append(out, Migration{Version: v, Name: rest, SQL: string(raw), Checksum: hex.EncodeToString(sum[:])})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// Result says what Up did.
type Result struct {
	Applied []int // versions applied by this call
	Current int   // highest applied version afterwards
}

// Up applies every pending migration. It holds a session-level named lock on
// one dedicated connection for the whole run, waiting up to lockWait.
func Up(ctx context.Context, db *sql.DB, ms []Migration, lockWait time.Duration, log *slog.Logger) (Result, error) {
	var res Result
	conn, err := db.Conn(ctx)
	if err != nil {
		return res, fmt.Errorf("migrate: connect: %w", err)
	}
	defer conn.Close()

	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, ?)", lockName, int(lockWait.Seconds())).Scan(&got); err != nil {
		return res, fmt.Errorf("migrate: GET_LOCK: %w", err)
	}
	if !got.Valid || got.Int64 != 1 {
		return res, fmt.Errorf("migrate: another migration holds lock %q for more than %s", lockName, lockWait)
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), "SELECT RELEASE_LOCK(?)", lockName) //nolint:errcheck // the lock dies with the connection anyway

	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
  version INT NOT NULL,
  name VARCHAR(128) NOT NULL,
  checksum CHAR(64) NOT NULL,
  applied_at_ms BIGINT NOT NULL,
  PRIMARY KEY (version))`); err != nil {
		return res, fmt.Errorf("migrate: create schema_migrations: %w", err)
	}
	applied := map[int]string{}
	rows, err := conn.QueryContext(ctx, "SELECT version, checksum FROM schema_migrations")
	if err != nil {
		return res, fmt.Errorf("migrate: read schema_migrations: %w", err)
	}
	for rows.Next() {
		var v int
		var sum string
		if err := rows.Scan(&v, &sum); err != nil {
			rows.Close()
			return res, err
		}
		applied[v] = sum
		res.Current = max(res.Current, v)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return res, err
	}

	for _, m := range ms {
		if sum, ok := applied[m.Version]; ok {
			if sum != m.Checksum {
				return res, &ChecksumError{Version: m.Version, Name: m.Name, Applied: sum, Found: m.Checksum}
			}
			continue
		}
		for i, stmt := range Statements(m.SQL) {
			if _, err := conn.ExecContext(ctx, stmt); err != nil && !rerunTolerated(err) {
				return res, fmt.Errorf("migrate: %04d_%s statement %d: %w", m.Version, m.Name, i+1, err)
			}
		}
		if _, err := conn.ExecContext(ctx,
			"INSERT INTO schema_migrations (version, name, checksum, applied_at_ms) VALUES (?, ?, ?, ?)",
			m.Version, m.Name, m.Checksum, time.Now().UnixMilli()); err != nil {
			return res, fmt.Errorf("migrate: record %04d_%s: %w", m.Version, m.Name, err)
		}
		if log != nil {
			log.Info("migration applied", "component", "migrate", "version", m.Version, "name", m.Name)
		}
		res.Applied = append(res.Applied, m.Version)
		res.Current = max(res.Current, m.Version)
	}
	return res, nil
}

// rerunTolerated: duplicate column (1060) and duplicate key name (1061) mean
// an earlier, interrupted run already did this statement.
func rerunTolerated(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1060 || me.Number == 1061)
}

// Statements splits a migration into statements at semicolons that end a
// line, dropping "--" comment lines. Migrations contain no procedures.
func Statements(src string) []string {
	var out []string
	var cur strings.Builder
	for _, line := range strings.Split(src, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
		if strings.HasSuffix(trimmed, ";") {
			s := strings.TrimSuffix(strings.TrimSpace(cur.String()), ";")
			out = append(out, s)
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s)
	}
	return out
}
