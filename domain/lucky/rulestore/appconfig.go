package rulestore

import (
	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/config"
)

// ConfigFrom maps process.rule_cache_size onto the room processor's rule
// loader Config and validates it, errors keyed by the application's key.
func ConfigFrom(app *config.Config) (Config, error) {
	c := Config{CacheSize: app.Process.RuleCacheSize}
	return c, cfgerr.Under("process.rules", map[string]string{"cache_size": "process.rule_cache_size"}, c.Validate())
}
