package wallet

import (
	"crypto/tls"
	"errors"
	"log/slog"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/config"
)

// ConfigFrom is the client of lucky.wallet_grpc_addr with
// lucky.wallet_credit_timeout, validated, errors keyed by those keys. It
// checks lucky.wallet_tls without reading its files (TLSFrom reads them
// where the draw service starts).
func ConfigFrom(app *config.Config) (Config, error) {
	l := app.Lucky
	c := Config{Addr: l.WalletGRPCAddr, Timeout: l.WalletCreditTimeout.D()}
	return c, errors.Join(
		cfgerr.Under("lucky", map[string]string{"addr": "lucky.wallet_grpc_addr", "timeout": "lucky.wallet_credit_timeout"}, c.Validate()),
		cfgerr.Under("lucky.wallet_tls", nil, l.WalletTLS.Files().Validate()))
}

// TLSFrom reads lucky.wallet_tls: nil when unset (plaintext), else the
// client config (errors keyed lucky.wallet_tls.*).
func TLSFrom(app *config.Config, log *slog.Logger) (*tls.Config, error) {
	w := app.Lucky.WalletTLS
	if !w.Enabled() {
		return nil, nil
	}
	f := w.Files()
	f.Logger = log.With("component", "lucky")
	tc, err := f.Load()
	return tc, cfgerr.Under("lucky.wallet_tls", nil, err)
}
