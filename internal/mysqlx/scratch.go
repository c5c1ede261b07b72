package mysqlx

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/hyapp/roomflow/internal/migrate"
)

// Scratch is a database of its own on a MySQL server, made for one test,
// benchmark or demo run and dropped after it. Use its DSN like any other
// (Open, sql.Open).
type Scratch struct {
	Name  string
	DSN   string // the server's DSN with Name as its database
	admin *sql.DB
}

// NewScratch creates database name on the server of serverDSN (whose
// database part is ignored), dropping a leftover of that name first, and
// applies roomflow's migrations when migrated. It fails naming the server's
// address (never the password) when the server does not answer.
func NewScratch(ctx context.Context, serverDSN, name string, migrated bool) (*Scratch, error) {
	if name == "" || strings.ContainsAny(name, "`/\\. ") {
		return nil, fmt.Errorf("mysql: scratch database name %q", name)
	}
	base, err := mysql.ParseDSN(serverDSN)
	if err != nil {
		return nil, errors.New("mysql: the server DSN does not parse")
	}
	base.DBName = ""
	Tune(base)
	admin, err := sql.Open("mysql", base.FormatDSN())
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := admin.PingContext(pctx); err != nil {
		admin.Close()
		return nil, fmt.Errorf("mysql: no server answers at %s: %w", base.Addr, err)
	}
	s := &Scratch{Name: name, admin: admin}
	for _, q := range []string{"DROP DATABASE IF EXISTS `" + name + "`", "CREATE DATABASE `" + name + "`"} {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			admin.Close()
			return nil, fmt.Errorf("mysql: scratch database %s: %w", name, err)
		}
	}
	dc := base.Clone()
	dc.DBName = name
	s.DSN = dc.FormatDSN()
	if migrated {
		if err := s.migrate(ctx); err != nil {
			s.Drop(context.WithoutCancel(ctx)) //nolint:errcheck // the migration error is the one to report
			return nil, err
		}
	}
	return s, nil
}

func (s *Scratch) migrate(ctx context.Context) error {
	db, err := sql.Open("mysql", s.DSN)
	if err != nil {
		return err
	}
	defer db.Close()
	ms, err := migrate.Load()
	if err != nil {
		return fmt.Errorf("mysql: scratch database %s: %w", s.Name, err)
	}
	if _, err := migrate.Up(ctx, db, ms, time.Minute, nil); err != nil {
		return fmt.Errorf("mysql: scratch database %s: migrate: %w", s.Name, err)
	}
	return nil
}

// Drop drops the database and releases the server connection. Close the
// pools on DSN first.
func (s *Scratch) Drop(ctx context.Context) error {
	defer s.admin.Close()
	_, err := s.admin.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+s.Name+"`")
	return err
}

// Keep releases the server connection and leaves the database in place
// (the demo's --keep).
func (s *Scratch) Keep() error { return s.admin.Close() }
