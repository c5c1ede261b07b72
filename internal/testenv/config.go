package testenv

import (
	"testing"

	"github.com/hyapp/roomflow/internal/config"
)

// Config returns a valid config on k and m (either may be nil) with the
// metrics server off and a per-test app_code-independent group naming, so
// tests sharing a real cluster never share consumer groups.
func Config(t testing.TB, k *Kafka, m *MySQL) *config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.Metrics.Addr = ""
	cfg.API.Addr, cfg.API.AppAddr, cfg.API.GRPCAddr = "", "", ""
	if k != nil {
		cfg.Kafka = k.Config
	}
	if m != nil {
		cfg.MySQL.DSN = m.DSN
	}
	u := UniqueName(t)
	cfg.Process.RoomGroup = u + "-room"
	cfg.Process.MicGroup = u + "-mic"
	cfg.Sink.Group = u + "-sink"
	cfg.OutboxWorker.Group = u + "-im"
	cfg.Relay.TransactionalID = u + "-relay"
	if err := cfg.Validate(); err != nil {
		t.Fatalf("testenv: config: %v", err)
	}
	return &cfg
}
