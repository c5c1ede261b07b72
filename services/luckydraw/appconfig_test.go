package luckydraw_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/cfgerr/cfgerrtest"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/services/luckydraw"
	"github.com/hyapp/roomflow/services/luckydraw/luckyoutbox"
)

// The defaults with an audit key equal the service's own; the kill
// switches default on and an explicit false is honoured; every lucky.*
// key is named when refused, never the audit key's value.
func TestConfigFrom(t *testing.T) {
	const key = "audit-key-never-printed"
	cfg := config.Default()
	cfg.Lucky.AuditKey = key
	c, err := luckydraw.ConfigFrom(&cfg, luckydraw.Config{})
	if err != nil || c.DrawTimeout != luckydraw.DefaultDrawTimeout || c.WalletCreditTimeout != luckydraw.DefaultWalletCreditTimeout ||
		c.DisableGlobalLuckyGift || c.DisableLargeTier || c.DisableWalletCreditDispatch {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	if c.OutboxFormat != luckyoutbox.FormatRows {
		t.Fatalf("lucky.outbox_format defaults to %q, want rows", c.OutboxFormat)
	}
	cfg.Lucky.OutboxFormat = luckyoutbox.FormatDrawEvents
	if c, err := luckydraw.ConfigFrom(&cfg, luckydraw.Config{}); err != nil || c.OutboxFormat != luckyoutbox.FormatDrawEvents {
		t.Fatalf("lucky.outbox_format draw_events: %q %v", c.OutboxFormat, err)
	}
	cfg.Lucky.Switches.WalletCreditDispatch = false
	if c, _ := luckydraw.ConfigFrom(&cfg, luckydraw.Config{}); !c.DisableWalletCreditDispatch {
		t.Fatal("lucky.switches.wallet_credit_dispatch: false must be honoured")
	}
	for _, tc := range []struct {
		key string
		mut func(*config.Config)
	}{
		{"lucky.audit_key", func(c *config.Config) { c.Lucky.AuditKey = "" }},
		{"lucky.draw_timeout", func(c *config.Config) { c.Lucky.DrawTimeout = -1 }},
		{"lucky.max_device_daily_payout", func(c *config.Config) { c.Lucky.MaxDeviceDailyPayout = -1 }},
		{"lucky.activity_period_end_ms", func(c *config.Config) { c.Lucky.ActivityPeriodPayout, c.Lucky.ActivityPeriodStartMs = 10, 100 }},
		{"lucky.large_tier_min_reward", func(c *config.Config) { c.Lucky.LargeTierMinReward = -1 }},
		{"app_code", func(c *config.Config) { c.AppCode = strings.Repeat("a", 33) }},
		{"lucky.outbox_format", func(c *config.Config) { c.Lucky.OutboxFormat = "draw-events" }},
		{"lucky.fairness.reveal_grace", func(c *config.Config) { c.Lucky.Fairness.RevealGrace = config.Duration(time.Second) }},
		{"mysql.max_open_conns", func(c *config.Config) { c.MySQL.MaxOpenConns = 1 }},
	} {
		cfg := config.Default()
		cfg.Lucky.AuditKey = key
		tc.mut(&cfg)
		_, err := luckydraw.ConfigFrom(&cfg, luckydraw.Config{})
		cfgerrtest.NamesKey(t, tc.key, err)
		if err != nil && strings.Contains(err.Error(), key) {
			t.Errorf("%s: error holds the audit key: %v", tc.key, err)
		}
	}
}

// lucky.require_tls refuses a listener other hosts reach without client
// certificates; a half-set lucky.tls is named without reading files.
func TestServerTLSFrom(t *testing.T) {
	cfg := config.Default()
	cfg.Lucky.RequireTLS, cfg.Lucky.GRPCAddr = true, ":9000"
	_, err := luckydraw.ServerTLSFrom(&cfg, slog.New(slog.DiscardHandler))
	cfgerrtest.NamesKey(t, "lucky.require_tls", err)
	cfg.Lucky.GRPCAddr = "127.0.0.1:9000"
	if srv, err := luckydraw.ServerTLSFrom(&cfg, slog.New(slog.DiscardHandler)); err != nil || srv != nil {
		t.Fatalf("loopback without TLS: %v %v", srv, err)
	}
	cfg.Lucky.TLS.CertFile = "/nonexistent/cert.pem"
	if err := luckydraw.CheckTLSFrom(&cfg); err == nil || !strings.Contains(err.Error(), "lucky.tls") {
		t.Fatalf("cert without key: %v", err)
	}
}

// An operator command's wait and operator are named by their flags.
func TestAdminConfigFrom(t *testing.T) {
	cfg := config.Default()
	c, err := luckydraw.AdminConfigFrom(&cfg, luckydraw.AdminConfig{Wait: 2 * time.Second, Operator: "ops"})
	if err != nil || c.Wait != 2*time.Second || c.Operator != "ops" || c.ReplacedVersionGrace != cfg.Lucky.ReplacedVersionGrace.D() ||
		c.LargeTierMinReward != cfg.Lucky.LargeTierMinReward {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	_, err = luckydraw.AdminConfigFrom(&cfg, luckydraw.AdminConfig{Wait: 2 * time.Hour})
	cfgerrtest.NamesKey(t, "--wait", err)
}

// TestRevealGraceCoversADrawTransaction: a seed is revealed only once
// every draw of its day can have committed: lucky.fairness.reveal_grace
// below lucky.draw_timeout plus RevealClockMargin is refused under its
// key (a draw takes nowMs in its day and may commit up to draw_timeout
// later, on a clock a little off the revealing replica's).
func TestRevealGraceCoversADrawTransaction(t *testing.T) {
	const timeout = 10 * time.Second
	for _, c := range []struct {
		grace time.Duration
		ok    bool
	}{
		{time.Millisecond, false},
		{timeout, false},
		{timeout + luckydraw.RevealClockMargin - time.Millisecond, false},
		{timeout + luckydraw.RevealClockMargin, true},
		{0, true}, // the default, 1h
	} {
		err := luckydraw.Config{AuditKey: "k", DrawTimeout: timeout, FairnessRevealGrace: c.grace}.Validate()
		if c.ok {
			if err != nil {
				t.Errorf("grace %s: %v", c.grace, err)
			}
			continue
		}
		cfgerrtest.NamesKey(t, "fairness.reveal_grace", err)
	}
}
