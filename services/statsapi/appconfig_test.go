package statsapi_test

import (
	"testing"

	"github.com/hyapp/roomflow/internal/cfgerr/cfgerrtest"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/services/statsapi"
)

// The defaults equal the API's own; a bad header or app_code is refused
// under its key; the listeners are the three api.* addresses.
func TestConfigFrom(t *testing.T) {
	def := config.Default()
	c, err := statsapi.ConfigFrom(&def, statsapi.Config{})
	if err != nil || c.UserHeader != statsapi.DefaultUserHeader || c.AppCodeHeader != statsapi.DefaultAppCodeHeader ||
		c.DefaultAppCode != def.AppCode || c.QueryTimeout != statsapi.DefaultQueryTimeout {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	for _, tc := range []struct {
		key string
		mut func(*config.Config)
	}{
		{"app_code", func(c *config.Config) { c.AppCode = "" }},
		{"api.user_header", func(c *config.Config) { c.API.UserHeader = "X User" }},
		{"api.app_code_header", func(c *config.Config) { c.API.AppCodeHeader = "X-App:Code" }},
		{"api.app_code_header", func(c *config.Config) { c.API.AppCodeHeader = "x-user-id" }},
	} {
		cfg := config.Default()
		tc.mut(&cfg)
		_, err := statsapi.ConfigFrom(&cfg, statsapi.Config{})
		cfgerrtest.NamesKey(t, tc.key, err)
	}
	cfg := config.Default()
	cfg.API.Addr, cfg.API.AppAddr, cfg.API.GRPCAddr = "a:1", "b:2", "c:3"
	if l := statsapi.ListenersFrom(&cfg); l != (statsapi.Listeners{Internal: "a:1", App: "b:2", GRPC: "c:3"}) {
		t.Errorf("listeners %+v", l)
	}
}
