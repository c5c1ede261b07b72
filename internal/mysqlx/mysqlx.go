// Package mysqlx opens roomflow's MySQL connection pool from config with the
// driver settings every component relies on.
package mysqlx

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/hyapp/roomflow/internal/config"
)

// Open returns a pool for cfg.MySQL.DSN and checks that the server answers.
// Errors never include the DSN's password.
func Open(ctx context.Context, cfg config.MySQLConfig) (*sql.DB, error) {
	dc, err := mysql.ParseDSN(cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("mysql: mysql.dsn does not parse")
	}
	Tune(dc)
	connector, err := mysql.NewConnector(dc)
	if err != nil {
		return nil, fmt.Errorf("mysql: %s: %w", config.RedactDSN(cfg.DSN), err)
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(cfg.MaxOpenConns)
	db.SetMaxIdleConns(cfg.MaxIdleConns)
	db.SetConnMaxLifetime(cfg.ConnMaxLife.D())
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("mysql: ping %s: %w", config.RedactDSN(cfg.DSN), err)
	}
	return db, nil
}

// Tune sets the driver options roomflow needs regardless of the DSN given:
// UTC, and interpolated params (one round trip per statement instead of
// prepare+execute+close, which matters for multi-row batches), and
// multi-statement queries, with which the lucky draw batch sends its writes
// under the pool locks in one round trip (every value still goes through
// the driver's escaping: roomflow builds no SQL from input). Isolation is
// chosen per transaction with sql.TxOptions, which both servers accept.
func Tune(dc *mysql.Config) {
	dc.InterpolateParams = true
	dc.MultiStatements = true
	dc.Loc = time.UTC
}
