package testenv

import (
	"context"
	"database/sql"
	"os"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // the driver of sql.Open

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
func NewMySQL(t testing.TB) *MySQL { return newMySQL(t, true) }

// NewEmptyMySQL creates a fresh database without migrations.
func NewEmptyMySQL(t testing.TB) *MySQL { return newMySQL(t, false) }

func newMySQL(t testing.TB, migrated bool) *MySQL {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := mysqlx.NewScratch(ctx, ServerDSN(), UniqueName(t), migrated)
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
