package rulestore_test

import (
	"testing"

	"github.com/hyapp/roomflow/domain/lucky/rulestore"
	"github.com/hyapp/roomflow/internal/cfgerr/cfgerrtest"
	"github.com/hyapp/roomflow/internal/config"
)

// process.rule_cache_size maps onto the cache size, and is named when
// refused.
func TestConfigFrom(t *testing.T) {
	cfg := config.Default()
	if c, err := rulestore.ConfigFrom(&cfg); err != nil || c.CacheSize != cfg.Process.RuleCacheSize {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	cfg.Process.RuleCacheSize = -1
	_, err := rulestore.ConfigFrom(&cfg)
	cfgerrtest.NamesKey(t, "process.rule_cache_size", err)
}
