package luckydraw

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/hyapp/roomflow/domain/fairness"
	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/tlsx"
)

// ConfigFrom maps lucky.* and app_code onto Config and validates it,
// errors keyed lucky.<field> ("lucky.audit_key"); own gives the
// Registerer and Logger. The kill switches are booleans that default to
// true, so they map negated (as outbox_worker.enabled): an explicit false
// is honoured.
func ConfigFrom(app *config.Config, own Config) (Config, error) {
	l := app.Lucky
	c := Config{
		AppCode:                     app.AppCode,
		DrawTimeout:                 l.DrawTimeout.D(),
		WalletCreditTimeout:         l.WalletCreditTimeout.D(),
		AuditKey:                    l.AuditKey,
		LargeTierMinReward:          l.LargeTierMinReward,
		MaxDeviceDailyPayout:        l.MaxDeviceDailyPayout,
		MaxAnchorDailyPayout:        l.MaxAnchorDailyPayout,
		ActivityPeriodPayout:        l.ActivityPeriodPayout,
		ActivityPeriodStartMs:       l.ActivityPeriodStartMs,
		ActivityPeriodEndMs:         l.ActivityPeriodEndMs,
		DisableGlobalLuckyGift:      !l.Switches.GlobalLuckyGiftEnabled,
		DisableLargeTier:            !l.Switches.LargeTierEnabled,
		DisableWalletCreditDispatch: !l.Switches.WalletCreditDispatch,
		PilotMode:                   l.Switches.PilotMode,
		ReplacedVersionGrace:        l.ReplacedVersionGrace.D(),
		Randomness:                  l.Randomness,
		FairnessAppCodes:            l.Fairness.AppCodes,
		FairnessDayLength:           l.Fairness.DayLength.D(),
		FairnessRevealGrace:         l.Fairness.RevealGrace.D(),
		OutboxFormat:                l.OutboxFormat,
		PoolConns:                   app.MySQL.MaxOpenConns,
		Registerer:                  own.Registerer,
		Logger:                      own.Logger,
	}
	return c, cfgerr.Under("lucky", map[string]string{"app_code": "app_code", "pool_conns": "mysql.max_open_conns"}, c.Validate())
}

// FairnessKeysFrom reads lucky.fairness.key and lucky.fairness.old_keys
// (nil without a key), where the service starts, not in `roomflow
// config`: the key is required when lucky.randomness is commit_reveal.
// Errors name the key, never its text.
func FairnessKeysFrom(app *config.Config) (*fairness.Keyring, error) {
	f := app.Lucky.Fairness
	if f.Key == "" {
		if app.Lucky.Randomness == fairness.ModeCommitReveal {
			return nil, &cfgerr.FieldError{Key: "lucky.fairness.key", Msg: "is required when lucky.randomness is commit_reveal (or set ROOMFLOW_LUCKY_FAIRNESS_KEY)"}
		}
		if len(f.OldKeys) == 0 {
			return nil, nil
		}
	}
	r, err := fairness.NewKeyring(f.Key, f.OldKeys)
	if err != nil {
		key, msg, _ := strings.Cut(err.Error(), ": ")
		return nil, &cfgerr.FieldError{Key: "lucky.fairness." + key, Msg: msg}
	}
	return r, nil
}

// CheckTLSFrom checks lucky.tls without reading its files: a config is
// valid before its certificates are mounted; ServerTLSFrom reads them
// where the service starts.
func CheckTLSFrom(app *config.Config) error {
	return cfgerr.Under("lucky.tls", nil, app.Lucky.TLS.Server().Validate())
}

// ServerTLSFrom reads lucky.tls (nil when unset: plaintext) and applies
// lucky.require_tls: a lucky.grpc_addr other hosts reach without
// lucky.tls.client_ca_file is refused with it, warned about without it
// (the WARN and roomflow_rpc_insecure come from the listener's guard).
// Errors name the key.
func ServerTLSFrom(app *config.Config, log *slog.Logger) (*tlsx.Server, error) {
	l := app.Lucky
	if l.RequireTLS && tlsx.Insecure(l.GRPCAddr, l.TLS.Server()) {
		return nil, &cfgerr.FieldError{Key: "lucky.require_tls", Msg: fmt.Sprintf(
			"is true but lucky.grpc_addr %q accepts callers from other hosts without a client certificate: set lucky.tls.cert_file, lucky.tls.key_file and lucky.tls.client_ca_file (and lucky.tls.allowed_client_names), or listen on loopback",
			l.GRPCAddr)}
	}
	srv, err := l.TLS.Server().Load(log.With("component", "lucky"))
	return srv, cfgerr.Under("lucky.tls", nil, err)
}

// AdminConfigFrom maps lucky.replaced_version_grace,
// lucky.large_tier_min_reward and lucky.switches.pilot_mode onto an
// operator command's AdminConfig and validates it; own gives what the
// command line does (Wait, Operator: errors name --wait and --operator).
func AdminConfigFrom(app *config.Config, own AdminConfig) (AdminConfig, error) {
	own.ReplacedVersionGrace = app.Lucky.ReplacedVersionGrace.D()
	own.LargeTierMinReward = app.Lucky.LargeTierMinReward
	own.PilotMode = app.Lucky.Switches.PilotMode
	own.PublishPayoutBandPPM = app.Lucky.PublishPayoutBandPPM
	return own, cfgerr.Under("lucky", map[string]string{"wait": "--wait", "operator": "--operator"}, own.Validate())
}

// CapsFrom is lucky.*'s risk caps (max_device_daily_payout,
// max_anchor_daily_payout, activity_period_*), checked: errors name the
// keys. `lucky rules simulate` caps its draws with them.
func CapsFrom(app *config.Config) (Caps, error) {
	l := app.Lucky
	c := Caps{MaxDeviceDailyPayout: l.MaxDeviceDailyPayout, MaxAnchorDailyPayout: l.MaxAnchorDailyPayout,
		ActivityPeriodPayout: l.ActivityPeriodPayout, ActivityPeriodStartMs: l.ActivityPeriodStartMs, ActivityPeriodEndMs: l.ActivityPeriodEndMs}
	var ch cfgerr.Checks
	c.check(&ch)
	return c, cfgerr.Under("lucky", nil, ch.Err())
}
