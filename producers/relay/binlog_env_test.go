package relay_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/mysqlx"
	"github.com/hyapp/roomflow/internal/tempmariadb"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/producers/relay"
)

// The binlog-mode tests share one throwaway MariaDB with the row binlog
// on (the development server on 3306 has none), started by the first test
// that needs it and stopped by TestMain; each test gets a database of its
// own on it.
var (
	binlogOnce   sync.Once
	binlogServer *tempmariadb.Server
	binlogErr    error
	binlogIDs    atomic.Uint32 // relay server ids handed out
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binlogServer != nil {
		binlogServer.Stop()
	}
	os.Exit(code)
}

// sharedBinlogServer is the package's binlog server, started on first use.
func sharedBinlogServer(t testing.TB) *tempmariadb.Server {
	t.Helper()
	binlogOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		binlogServer, binlogErr = tempmariadb.Start(ctx, tempmariadb.Options{Binlog: true, ServerID: 1})
	})
	if binlogErr != nil {
		t.Fatalf("binlog tests need a throwaway mariadbd: %v", binlogErr)
	}
	return binlogServer
}

// binlogDB is a migrated database of its own on the shared binlog server.
func binlogDB(t testing.TB) *testenv.MySQL {
	t.Helper()
	return testenv.NewMySQLOn(t, sharedBinlogServer(t).DSN)
}

// mysql80BinlogDB is a migrated database on a MySQL 8.0 container with
// GTIDs on and binlog_row_metadata=FULL (binlog mode's requirements there);
// skipped where no container engine runs (testenv.MySQL80DSN).
func mysql80BinlogDB(t testing.TB) *testenv.MySQL {
	t.Helper()
	dsn := testenv.MySQL80DSN(t, "--gtid-mode=ON", "--enforce-gtid-consistency=ON", "--binlog-row-metadata=FULL", "--server-id=1")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := mysqlx.NewScratch(ctx, dsn, testenv.UniqueName(t), true)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", s.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &testenv.MySQL{DB: db, DSN: s.DSN, Name: s.Name}
}

// binlogConfig is cfg in binlog mode on m with a server id of its own.
func binlogConfig(cfg relay.Config, m *testenv.MySQL) relay.Config {
	cfg.Mode = relay.ModeBinlog
	cfg.Binlog = relay.BinlogConfig{DSN: m.DSN, ServerID: 1000 + binlogIDs.Add(1), HeartbeatPeriod: 200 * time.Millisecond}
	return cfg
}

// rowsOf is n outbox rows of one room with versions from+1.., event ids
// prefix-<version>.
func rowsOf(prefix, room string, from, n int) []outboxRow {
	out := make([]outboxRow, n)
	for i := range out {
		v := int64(from + i + 1)
		id := fmt.Sprintf("%s-%d", prefix, v)
		out[i] = outboxRow{eventID: id, eventType: "RoomMicChanged", roomID: room, version: v,
			payload: payloadFor(id, 64), occurred: time.Now().UnixMilli()}
	}
	return out
}

// relayMode is one way a test runs the relay: where its database lives
// and how its config is set. The behaviour tests (crash, HA, fencing,
// late commits and rollbacks) run in both modes through forModes.
type relayMode struct {
	name   relay.Mode
	mysql  func(testing.TB) *testenv.MySQL
	config func(relay.Config, *testenv.MySQL) relay.Config
}

var relayModes = []relayMode{
	{relay.ModePoll, testenv.NewMySQL, func(c relay.Config, _ *testenv.MySQL) relay.Config { return c }},
	{relay.ModeBinlog, binlogDB, binlogConfig},
}

// forModes runs body as the subtests "poll" and "binlog".
func forModes(t *testing.T, body func(*testing.T, relayMode)) {
	for _, m := range relayModes {
		t.Run(string(m.name), func(t *testing.T) { body(t, m) })
	}
}

// killBinlogDumps ends every binlog stream of the shared server (the
// package's tests run one relay at a time), as a server restart would, and
// returns how many it ended.
func killBinlogDumps(t testing.TB, db *sql.DB) int {
	t.Helper()
	n, err := testenv.KillBinlogDumps(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
