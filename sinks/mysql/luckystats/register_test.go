package luckystats_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyapp/roomflow/sinks/mysql/luckystats"
)

// No registry registers nothing; a registry gets the collector once.
func TestRegisterPayoutCollector(t *testing.T) {
	cfg := luckystats.PayoutCollectorConfig{AppCode: "hyapp"}
	if err := luckystats.RegisterPayoutCollector(nil, cfg, nil); err != nil {
		t.Fatalf("nil registry: %v", err)
	}
	reg := prometheus.NewRegistry()
	if err := luckystats.RegisterPayoutCollector(reg, cfg, nil); err != nil {
		t.Fatal(err)
	}
	if err := luckystats.RegisterPayoutCollector(reg, cfg, nil); err == nil {
		t.Error("a second collector of the same series must be refused")
	}
}
