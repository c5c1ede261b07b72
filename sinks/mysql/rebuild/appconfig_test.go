package rebuild_test

import (
	"testing"

	"github.com/hyapp/roomflow/internal/cfgerr/cfgerrtest"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/sinks/mysql/rebuild"
)

// The sink's group and the ledger topic always, the inflow topic only
// with pools; a bad flag is named as the flag.
func TestConfigFrom(t *testing.T) {
	cfg := config.Default()
	own := rebuild.Config{BatchSize: rebuild.DefaultBatchSize, Idle: rebuild.DefaultIdle}
	c, err := rebuild.ConfigFrom(&cfg, own, true)
	if err != nil || c.Group != cfg.Sink.Group || c.LedgerTopic != cfg.Kafka.Topics.MicLedger || c.InflowTopic != cfg.Kafka.Topics.LuckyPoolInflow {
		t.Fatalf("with pools: %+v %v", c, err)
	}
	if c, err := rebuild.ConfigFrom(&cfg, own, false); err != nil || c.InflowTopic != "" {
		t.Fatalf("without pools: %+v %v", c, err)
	}
	own.BatchSize = -1
	_, err = rebuild.ConfigFrom(&cfg, own, false)
	cfgerrtest.NamesKey(t, "--batch-size", err)
}
