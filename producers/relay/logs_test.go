package relay_test

import (
	"database/sql"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/producers/relay"
)

// The relay logs under one component per line: with Kafka unreachable, its
// Kafka clients' warnings carry their own component (relay-leader, and
// relay-lag for the position tail of roomflow_relay_lag_seconds) once, its
// own lines component=relay.
func TestRelayLogsUnderOneComponent(t *testing.T) {
	cfg := unconnectedConfig(t)
	db, err := sql.Open("mysql", testenv.ServerDSN()) // never used: the relay never leads
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	logs := &testenv.SyncBuffer{}
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	cfg.Kafka.Logger = cfg.Logger
	r, err := relay.New(cfg, db)
	if err != nil {
		t.Fatal(err)
	}
	testenv.RunUntil(t, r.Run, 20*time.Second, "the relay's Kafka client to warn", func() bool {
		return strings.Contains(logs.String(), "unable to open connection to broker")
	})
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		switch {
		case strings.Contains(l, "unable to open connection") && strings.Contains(l, `"relay-lag"`):
			testenv.CheckLogComponent(t, l, "relay-lag")
		case strings.Contains(l, "unable to open connection"):
			testenv.CheckLogComponent(t, l, "relay-leader")
		default:
			testenv.CheckLogComponent(t, l, "relay")
		}
	}
}
