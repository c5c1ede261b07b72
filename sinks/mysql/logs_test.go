package mysqlsink_test

import (
	"database/sql"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/testenv"
	mysqlsink "github.com/hyapp/roomflow/sinks/mysql"
)

// The sink logs under one component: with Kafka unreachable, the Kafka
// client's warnings carry component=sink once, like the sink's own lines.
func TestSinkLogsUnderOneComponent(t *testing.T) {
	db, err := sql.Open("mysql", testenv.ServerDSN()) // never used: nothing is consumed
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	logs := &testenv.SyncBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	group := testenv.UniqueName(t)
	s, err := mysqlsink.New(mysqlsink.Config{
		Group:  group,
		Kafka:  kafkax.Cluster{Brokers: []string{testenv.ClosedAddr(t)}, Logger: log},
		Logger: log,
	}, newStore(t, db, group))
	if err != nil {
		t.Fatal(err)
	}
	testenv.RunUntil(t, s.Run, 20*time.Second, "the sink's Kafka client to warn", func() bool {
		return strings.Contains(logs.String(), "unable to open connection to broker")
	})
	testenv.CheckLogComponent(t, logs.String(), "sink")
}
