package relay_test

import (
	"database/sql"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/producers/relay"
)

// Two relays on one registry (a test, a process hosting both) share their
// series like every other component, instead of the second failing to
// build with "duplicate metrics collector registration".
func TestTwoRelaysShareOneRegistry(t *testing.T) {
	cfg := unconnectedConfig(t)
	db, err := sql.Open("mysql", testenv.ServerDSN()) // never used: the relays never run
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	reg := prometheus.NewRegistry()
	for i := range 2 {
		cfg.Registerer = reg
		if _, err := relay.New(cfg, db); err != nil {
			t.Fatalf("relay %d: %v", i+1, err)
		}
	}
	if _, ok := testenv.Metric(reg, "roomflow_relay_batches_total", "result", "committed"); !ok {
		t.Fatal("the relays' series are not registered")
	}
}
