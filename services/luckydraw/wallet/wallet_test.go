package wallet_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/internal/tlsx"
	"github.com/hyapp/roomflow/schemas/walletv1"
	"github.com/hyapp/roomflow/services/luckydraw/wallet"
	"github.com/hyapp/roomflow/services/luckydraw/wallet/walletfake"
)

func setup(t *testing.T, timeout time.Duration) (*wallet.Client, *walletfake.Wallet) {
	t.Helper()
	fake, err := walletfake.Listen(walletfake.Config{Seed: 1}, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fake.Close() })
	c, err := wallet.New(wallet.Config{Addr: fake.Addr(), Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, fake
}

var reward = &walletv1.CreditLuckyRewardRequest{RewardId: "rw1", CommandId: "c1", DrawId: "d1", RoomId: "r1", UserId: 3, RewardCoins: 40, Reason: "lucky_gift_reward"}

func TestCreditAndRepeat(t *testing.T) {
	c, fake := setup(t, 0)
	ctx := context.Background()
	a, err := c.Credit(ctx, reward)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Credit(ctx, reward)
	if err != nil {
		t.Fatal(err)
	}
	if a.GetCreditReceiptId() == "" || a.GetCreditReceiptId() != b.GetCreditReceiptId() {
		t.Fatalf("receipts %q, %q: want one, equal", a.GetCreditReceiptId(), b.GetCreditReceiptId())
	}
	if fake.Stats().Credits != 1 || fake.Balances()[3] != 40 {
		t.Fatalf("wallet stats %+v balances %v", fake.Stats(), fake.Balances())
	}
}

func TestCreditErrors(t *testing.T) {
	c, fake := setup(t, 60*time.Millisecond)
	ctx := context.Background()

	// Refused before any call.
	for _, r := range []*walletv1.CreditLuckyRewardRequest{{UserId: 1, RewardCoins: 1}, {RewardId: "x", RewardCoins: 1}, {RewardId: "x", UserId: 1}} {
		if _, err := c.Credit(ctx, r); !errors.Is(err, wallet.ErrInvalidRequest) {
			t.Fatalf("%v: err %v, want ErrInvalidRequest", r, err)
		}
	}
	if n := fake.Stats().Calls; n != 0 {
		t.Fatalf("%d calls reached the wallet, want 0", n)
	}

	check := func(what string, err error, code codes.Code, timeout bool) {
		t.Helper()
		var ce *wallet.CreditError
		if !errors.As(err, &ce) || ce.Code != code || ce.Timeout() != timeout || ce.RewardID != "rw1" {
			t.Fatalf("%s: err %v, want a CreditError with code %s", what, err, code)
		}
	}
	_ = fake.SetFaults(walletfake.Faults{ErrorRate: 1})
	_, err := c.Credit(ctx, reward)
	check("error", err, codes.Unavailable, false)

	// The client's own timeout bounds a hanging wallet.
	_ = fake.SetFaults(walletfake.Faults{TimeoutRate: 1})
	t0 := time.Now()
	_, err = c.Credit(ctx, reward)
	check("hang", err, codes.DeadlineExceeded, true)
	if d := time.Since(t0); d < 60*time.Millisecond || d > 2*time.Second {
		t.Fatalf("hang ended after %s, want the 60ms timeout", d)
	}
	// A caller's earlier deadline wins.
	tctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	t0 = time.Now()
	_, err = c.Credit(tctx, reward)
	cancel()
	check("caller deadline", err, codes.DeadlineExceeded, true)
	if d := time.Since(t0); d > 50*time.Millisecond {
		t.Fatalf("caller deadline of 10ms ended the call after %s", d)
	}

	_ = fake.SetFaults(walletfake.Faults{LostRate: 1})
	_, err = c.Credit(ctx, reward)
	check("lost", err, codes.Unavailable, false)
	_ = fake.SetFaults(walletfake.Faults{})
	resp, err := c.Credit(ctx, reward)
	if err != nil || resp.GetCreditReceiptId() != walletfake.ReceiptID("rw1") {
		t.Fatalf("retry after a lost answer: %v, %v", resp, err)
	}
	if fake.Stats().Credits != 1 || fake.Balances()[3] != 40 {
		t.Fatalf("wallet stats %+v balances %v", fake.Stats(), fake.Balances())
	}
}

func TestUnreachableWallet(t *testing.T) {
	c, err := wallet.New(wallet.Config{Addr: testenv.ClosedAddr(t), Timeout: time.Second})
	if err != nil {
		t.Fatalf("New must not dial: %v", err)
	}
	defer c.Close()
	_, err = c.Credit(context.Background(), reward)
	var ce *wallet.CreditError
	if !errors.As(err, &ce) || ce.Code != codes.Unavailable {
		t.Fatalf("err %v, want a CreditError with Unavailable", err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  wallet.Config
		keys []string
	}{
		{wallet.Config{Addr: "wallet-service:13004"}, nil},
		{wallet.Config{}, []string{"addr"}},
		{wallet.Config{Addr: "w:1", Timeout: -time.Second}, []string{"timeout"}},
	} {
		if got := cfgerr.Keys(tc.cfg.Validate()); !slices.Equal(got, tc.keys) {
			t.Fatalf("%+v: keys %v, want %v", tc.cfg, got, tc.keys)
		}
		if _, err := wallet.New(tc.cfg); (err != nil) != (tc.keys != nil) {
			t.Fatalf("%+v: New err %v", tc.cfg, err)
		}
	}
}

// lucky.wallet_tls: against a fake wallet that requires a client
// certificate of its CA naming roomflow, a plaintext client, a TLS client
// without a certificate, a certificate of another CA and one whose names
// are not allowed credit nothing; a client that does not trust the
// wallet's certificate neither; the allowed client, loaded from files
// like the wiring does (tlsx.ClientFiles, server_name), credits.
func TestCreditOverMutualTLS(t *testing.T) {
	p := testenv.NewPKI(t, "wallet.test", true)
	srv, err := tlsx.ServerConfig{CertFile: p.ServerCert, KeyFile: p.ServerKey, ClientCAFile: p.CAFile,
		AllowedClientNames: []string{testenv.AllowedClient}}.Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	fake, err := walletfake.Listen(walletfake.Config{Seed: 1, TLS: srv}, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fake.Close() })
	credit := func(name string, tc *tls.Config, rewardID string) error {
		t.Helper()
		c, err := wallet.New(wallet.Config{Addr: fake.Addr(), Timeout: 3 * time.Second, TLS: tc})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		r := proto.Clone(reward).(*walletv1.CreditLuckyRewardRequest)
		r.RewardId = rewardID
		_, err = c.Credit(context.Background(), r)
		return err
	}
	for i, c := range p.Callers(t) {
		if c.Refused == "" {
			continue // below, from files
		}
		if err := credit(c.Name, c.TLS, fmt.Sprintf("refused-%d", i)); err == nil {
			t.Errorf("%s: credited", c.Name)
		}
	}
	other := testenv.NewPKI(t, "wallet.test", true)
	allowed := p.Issue(t, testenv.LeafOpts{Name: "roomflow", URIs: []string{testenv.AllowedClient}})
	untrusting, err := tlsx.ClientFiles{CAFile: other.CAFile, CertFile: allowed.CertFile, KeyFile: allowed.KeyFile, ServerName: "wallet.test"}.Load()
	if err != nil {
		t.Fatal(err)
	}
	if err := credit("client trusting another CA", untrusting, "untrusting"); err == nil {
		t.Error("a client that does not trust the wallet's certificate credited")
	}
	if n := fake.Stats().Calls; n != 0 {
		t.Fatalf("the wallet answered %d refused calls", n)
	}
	files, err := tlsx.ClientFiles{CAFile: p.CAFile, CertFile: allowed.CertFile, KeyFile: allowed.KeyFile, ServerName: "wallet.test", Reload: true}.Load()
	if err != nil {
		t.Fatal(err)
	}
	if err := credit("allowed", files, "allowed"); err != nil {
		t.Fatalf("allowed client: %v", err)
	}
	if led := fake.Ledger(); len(led) != 1 || led["allowed"].Coins != reward.GetRewardCoins() {
		t.Fatalf("ledger %v: want the allowed client's one credit", led)
	}
}
