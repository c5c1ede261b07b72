package testenv

import (
	"context"
	"database/sql"
	"os"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/hyapp/roomflow/internal/migrate"
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
func NewMySQL(t testing.TB) *MySQL {
	m := NewEmptyMySQL(t)
	ms, err := migrate.Load()
	if err != nil {
		t.Fatalf("testenv: load migrations: %v", err)
	}
	if _, err := migrate.Up(context.Background(), m.DB, ms, 30*time.Second, nil); err != nil {
		t.Fatalf("testenv: migrate: %v", err)
	}
	return m
}

// NewEmptyMySQL creates a fresh database without migrations.
func NewEmptyMySQL(t testing.TB) *MySQL {
	t.Helper()
	base, err := mysql.ParseDSN(ServerDSN())
	if err != nil {
		t.Fatalf("testenv: ROOMFLOW_TEST_MYSQL_DSN does not parse: %v", err)
	}
	base.DBName = ""
	mysqlx.Tune(base)
	admin, err := sql.Open("mysql", base.FormatDSN())
	if err != nil {
		t.Fatalf("testenv: mysql: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := admin.PingContext(ctx); err != nil {
		admin.Close()
		t.Fatalf("testenv: MySQL is required at %s (set ROOMFLOW_TEST_MYSQL_DSN): %v", base.Addr, err)
	}
	name := UniqueName(t)
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE `"+name+"`"); err != nil {
		admin.Close()
		t.Fatalf("testenv: create database: %v", err)
	}
	dc := base.Clone()
	dc.DBName = name
	db, err := sql.Open("mysql", dc.FormatDSN())
	if err != nil {
		t.Fatalf("testenv: mysql: %v", err)
	}
	db.SetMaxOpenConns(32)
	db.SetMaxIdleConns(32)
	t.Cleanup(func() {
		db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			t.Logf("testenv: drop database %s: %v", name, err)
		}
		admin.Close()
	})
	return &MySQL{DB: db, DSN: dc.FormatDSN(), Name: name}
}
