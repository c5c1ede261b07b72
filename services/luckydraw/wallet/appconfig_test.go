package wallet_test

import (
	"testing"

	"github.com/hyapp/roomflow/internal/cfgerr/cfgerrtest"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/services/luckydraw/wallet"
)

// The wallet client takes lucky.wallet_grpc_addr and the credit timeout;
// a bad address is named; no lucky.wallet_tls means plaintext.
func TestConfigFrom(t *testing.T) {
	cfg := config.Default()
	c, err := wallet.ConfigFrom(&cfg)
	if err != nil || c.Addr != cfg.Lucky.WalletGRPCAddr || c.Timeout != cfg.Lucky.WalletCreditTimeout.D() {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	if tc, err := wallet.TLSFrom(&cfg, nil); tc != nil || err != nil {
		t.Fatalf("no lucky.wallet_tls: %v %v", tc, err)
	}
	cfg.Lucky.WalletGRPCAddr = "no-port"
	_, err = wallet.ConfigFrom(&cfg)
	cfgerrtest.NamesKey(t, "lucky.wallet_grpc_addr", err)
}
