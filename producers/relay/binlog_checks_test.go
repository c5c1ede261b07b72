package relay_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/go-sql-driver/mysql"

	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/producers/relay"
)

// checkServer runs the binlog start-up checks of cfg (relay db db),
// logging to logs.
func checkServer(t *testing.T, cfg relay.Config, db *sql.DB, logs *testenv.SyncBuffer) error {
	t.Helper()
	cfg.Kafka = kafkax.Cluster{Brokers: []string{"127.0.0.1:1"}}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	r, err := relay.New(cfg, db)
	if err != nil {
		t.Fatal(err)
	}
	return r.CheckBinlogServer(context.Background())
}

// registerReplica streams the binlog of m's server from its end as a
// replica with server id id registered as host.
func registerReplica(t *testing.T, m *testenv.MySQL, id uint32, host string) *replication.BinlogSyncer {
	t.Helper()
	dc, err := mysql.ParseDSN(m.DSN)
	if err != nil {
		t.Fatal(err)
	}
	var port uint16
	if _, err := fmt.Sscanf(dc.Addr, "127.0.0.1:%d", &port); err != nil {
		t.Fatal(err)
	}
	var gtid string
	if err := m.DB.QueryRowContext(context.Background(), "SELECT @@gtid_binlog_pos").Scan(&gtid); err != nil {
		t.Fatal(err)
	}
	set, err := gomysql.ParseMariadbGTIDSet(gtid)
	if err != nil {
		t.Fatal(err)
	}
	s := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{ServerID: id, Flavor: gomysql.MariaDBFlavor,
		Host: "127.0.0.1", Port: port, User: dc.User, Localhost: host, HeartbeatPeriod: 100 * time.Millisecond, ReadTimeout: time.Second,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if _, err := s.StartSyncGTID(set); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// replicaHosts is the SHOW SLAVE HOSTS host of each registered server id.
func replicaHosts(t *testing.T, db *sql.DB) map[uint32]string {
	t.Helper()
	rs, err := db.QueryContext(context.Background(), "SHOW SLAVE HOSTS")
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	hosts := map[uint32]string{}
	for rs.Next() {
		var id, master uint32
		var host string
		var port int
		if err := rs.Scan(&id, &host, &port, &master); err != nil {
			t.Fatal(err)
		}
		hosts[id] = host
	}
	return hosts
}

// TestBinlogServerIDConflict: another binlog client registered with the
// relay's server id is named at start; a registration of the same id as
// the relay's own host name (a replica of this relay, such as an
// ex-leader's lingering stream) is not a conflict.
func TestBinlogServerIDConflict(t *testing.T) {
	m := binlogDB(t)
	cfg := binlogConfig(unconnectedConfig(t), m)
	id := cfg.Binlog.ServerID
	logs := &testenv.SyncBuffer{}

	registerReplica(t, m, id, "debezium-7")
	testenv.Eventually(t, 10*time.Second, "the other client registered", func() bool { return replicaHosts(t, m.DB)[id] == "debezium-7" })
	err := checkServer(t, cfg, m.DB, logs)
	var ce *relay.BinlogCheckError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), fmt.Sprintf("server_id %d is used by another replica", id)) ||
		!strings.Contains(err.Error(), `"debezium-7"`) {
		t.Fatalf("err = %v, want a *BinlogCheckError naming server id %d and host debezium-7", err, id)
	}
	// Another relay id, registered by the relay's own host name; other
	// ids (the one above) are no one's business.
	own := binlogConfig(unconnectedConfig(t), m)
	registerReplica(t, m, own.Binlog.ServerID, relay.ReplicaHost)
	testenv.Eventually(t, 10*time.Second, "a relay replica registered", func() bool {
		return replicaHosts(t, m.DB)[own.Binlog.ServerID] == relay.ReplicaHost
	})
	if err := checkServer(t, own, m.DB, logs); err != nil {
		t.Fatalf("the relay's own registration of its id is a conflict: %v", err)
	}
}

// TestBinlogGrantsThroughRoles: the replication privileges granted
// through the user's default role (via a nested role) pass the checks; a
// role granted but not enabled at login gives the stream nothing, and the
// error says to make it the default role. Such a user cannot list
// replicas, so the server id check is skipped with a warning.
func TestBinlogGrantsThroughRoles(t *testing.T) {
	ctx := context.Background()
	m := binlogDB(t)
	base := binlogConfig(unconnectedConfig(t), m)
	exec := func(qs ...string) {
		t.Helper()
		for _, q := range qs {
			if _, err := m.DB.ExecContext(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	exec("CREATE ROLE relay_repl", "GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO relay_repl",
		"CREATE ROLE relay_outer", "GRANT relay_repl TO relay_outer",
		"CREATE USER 'by_default'@'127.0.0.1' IDENTIFIED BY 'pw1'", "GRANT relay_outer TO 'by_default'@'127.0.0.1'",
		"SET DEFAULT ROLE relay_outer FOR 'by_default'@'127.0.0.1'",
		"CREATE USER 'not_enabled'@'127.0.0.1' IDENTIFIED BY 'pw2'", "GRANT relay_repl TO 'not_enabled'@'127.0.0.1'")
	t.Cleanup(func() {
		for _, q := range []string{"DROP USER 'by_default'@'127.0.0.1'", "DROP USER 'not_enabled'@'127.0.0.1'", "DROP ROLE relay_outer", "DROP ROLE relay_repl"} {
			_, _ = m.DB.ExecContext(context.Background(), q)
		}
	})
	as := func(user, pw string) relay.Config {
		dc, err := mysql.ParseDSN(m.DSN)
		if err != nil {
			t.Fatal(err)
		}
		dc.User, dc.Passwd = user, pw
		cfg := base
		cfg.Binlog.DSN = dc.FormatDSN()
		return cfg
	}
	logs := &testenv.SyncBuffer{}
	if err := checkServer(t, as("by_default", "pw1"), m.DB, logs); err != nil {
		t.Fatalf("privileges through the default role reported missing: %v", err)
	}
	if !strings.Contains(logs.String(), "relay.binlog.server_id cannot be checked against other replicas") {
		t.Errorf("no warning that the server id check was skipped: %s", logs)
	}
	err := checkServer(t, as("not_enabled", "pw2"), m.DB, logs)
	var ce *relay.BinlogCheckError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "REPLICATION SLAVE") ||
		!strings.Contains(err.Error(), "roles granted but not enabled at login do not count (relay_repl)") {
		t.Fatalf("err = %v, want the missing privileges and the role that is not enabled", err)
	}
	if strings.Contains(err.Error()+logs.String(), "pw2") {
		t.Fatal("a password in the error or the logs")
	}

	// The replication user streams; the relay's database user reads.
	k := newKafka(t)
	cfg := as("by_default", "pw1")
	cfg.Kafka, cfg.Topic, cfg.DLQTopic, cfg.OffsetsTopic = k.Cluster(), k.Config.Topics.RoomEvents, k.Config.Topics.DLQ, k.Config.Topics.RelayOffsets
	x := startRelay(t, cfg, m.DB, nil)
	if err := insertRows(ctx, m.DB, rowsOf("r", "room-r", 0, 10)); err != nil {
		t.Fatal(err)
	}
	waitCount(t, k, cfg.Topic, 10, 30*time.Second)
	x.stop(t)
	checkExactlyOnce(t, loadOracle(t, m.DB), drain(t, k, cfg.Topic))

	// binlog.dsn must reach the relay database's server.
	dev := testenv.NewMySQL(t)
	err = checkServer(t, base, dev.DB, logs)
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "both must be the same server") {
		t.Fatalf("err = %v, want binlog.dsn and the relay's database named as different servers", err)
	}
}
