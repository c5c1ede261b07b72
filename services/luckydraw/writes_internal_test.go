package luckydraw

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/mysqlx"
	"github.com/hyapp/roomflow/internal/testenv"
)

// TestWritesOneQuery: a batch's writes go as one multi-statement query on
// a pool tuned as roomflow's, one by one on a plain pool (found out at the
// first batch, nothing written twice), with values that look like SQL
// intact either way; a failing statement fails the whole and its
// transaction leaves nothing.
func TestWritesOneQuery(t *testing.T) {
	m := testenv.NewEmptyMySQL(t)
	ctx := context.Background()
	if _, err := m.DB.ExecContext(ctx, `CREATE TABLE w (a INT PRIMARY KEY, b VARCHAR(16) NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	tuned, err := mysqlx.Open(ctx, config.MySQLConfig{DSN: m.DSN, MaxOpenConns: 2, MaxIdleConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer tuned.Close()
	dc, err := mysql.ParseDSN(m.DSN)
	if err != nil {
		t.Fatal(err)
	}
	dc.MultiStatements = false
	plain, err := sql.Open("mysql", dc.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	for _, c := range []struct {
		name string
		db   *sql.DB
		want int32
	}{{"tuned", tuned, writesMulti}, {"plain", plain, writesSingle}} {
		var mode atomic.Int32
		run := func(w *writes) error {
			tx, err := c.db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			if err := w.exec(ctx, tx, &mode); err != nil {
				return err
			}
			return tx.Commit()
		}
		var w writes
		w.add("INSERT INTO w (a, b) VALUES ", [][]any{{1, "x;y"}, {2, "it's"}})
		w.add("INSERT INTO w (a, b) VALUES ", [][]any{{3, "?"}}, " ON DUPLICATE KEY UPDATE b = VALUES(b)")
		if err := run(&w); err != nil || mode.Load() != c.want {
			t.Fatalf("%s: %v, mode %d; want nil, %d", c.name, err, mode.Load(), c.want)
		}
		var bad writes
		bad.add("INSERT INTO w (a, b) VALUES ", [][]any{{4, "new"}})
		bad.add("INSERT INTO w (a, b) VALUES ", [][]any{{1, "dup"}})
		var me *mysql.MySQLError
		if err := run(&bad); !errors.As(err, &me) || me.Number != 1062 || mode.Load() != c.want {
			t.Fatalf("%s: a duplicate key gave %v (mode %d), want error 1062", c.name, err, mode.Load())
		}
		got := map[int]string{}
		rows, err := m.DB.QueryContext(ctx, `SELECT a, b FROM w`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var a int
			var b string
			if err := rows.Scan(&a, &b); err != nil {
				t.Fatal(err)
			}
			got[a] = b
		}
		rows.Close()
		if len(got) != 3 || got[1] != "x;y" || got[2] != "it's" || got[3] != "?" {
			t.Fatalf("%s: table %v", c.name, got)
		}
		if _, err := m.DB.ExecContext(ctx, `DELETE FROM w`); err != nil {
			t.Fatal(err)
		}
	}
}
