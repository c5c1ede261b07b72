package statsapi

import (
	"log/slog"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/tlsx"
)

// ConfigFrom maps app_code and the api.* headers onto Config and
// validates it, errors keyed by the application's keys; own gives the
// Registerer and Logger. The api.* listener addresses are app-wide keys
// (internal/config checks them): ListenersFrom maps them, TLSFrom reads
// api.tls.
func ConfigFrom(app *config.Config, own Config) (Config, error) {
	c := Config{
		DefaultAppCode: app.AppCode,
		QueryTimeout:   DefaultQueryTimeout, // no key of its own
		UserHeader:     app.API.UserHeader,
		AppCodeHeader:  app.API.AppCodeHeader,
		Registerer:     own.Registerer,
		Logger:         own.Logger,
	}
	return c, cfgerr.Under("api", map[string]string{"default_app_code": "app_code"}, c.Validate())
}

// ListenersFrom are the configured addresses: api.addr, api.app_addr,
// api.grpc_addr (each "" when off).
func ListenersFrom(app *config.Config) Listeners {
	return Listeners{Internal: app.API.Addr, App: app.API.AppAddr, GRPC: app.API.GRPCAddr}
}

// TLSFrom reads api.tls's files (nil when unset: plaintext), where a
// command starts serving, not in `roomflow config`: errors keyed
// api.tls.*.
func TLSFrom(app *config.Config, log *slog.Logger) (*tlsx.Server, error) {
	srv, err := app.API.TLS.Server().Load(log.With("component", "api"))
	return srv, cfgerr.Under("api.tls", nil, err)
}
