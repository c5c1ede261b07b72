package luckystats

import (
	"database/sql"

	"github.com/prometheus/client_golang/prometheus"
)

// RegisterPayoutCollector registers the collector of cfg.AppCode's payout
// facts in db on reg; a nil reg (no metrics) registers nothing.
func RegisterPayoutCollector(reg prometheus.Registerer, cfg PayoutCollectorConfig, db *sql.DB) error {
	if reg == nil {
		return nil
	}
	pc, err := NewPayoutCollector(cfg, db)
	if err != nil {
		return err
	}
	return reg.Register(pc)
}
