package luckydraw

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyapp/roomflow/domain/fairness"
	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/tlsx"
	"github.com/hyapp/roomflow/services/luckydraw/luckyoutbox"
)

// Defaults of Config, equal to roomflow's lucky.* defaults.
const (
	DefaultDrawTimeout         = 300 * time.Millisecond
	DefaultWalletCreditTimeout = 500 * time.Millisecond
	DefaultSwitchCacheTTL      = time.Second
	DefaultMaxBatch            = 32
	DefaultPipelineDepth       = 2
	// MaxReplacedVersionGrace bounds ReplacedVersionGrace: a replaced
	// version must not keep drawing for long after a publish.
	MaxReplacedVersionGrace    = 5 * time.Minute
	DefaultFairnessDayLength   = 24 * time.Hour
	DefaultFairnessRevealGrace = time.Hour
	// RevealClockMargin is what FairnessRevealGrace must exceed DrawTimeout
	// by: a draw takes its time inside its day and commits up to
	// DrawTimeout later, and the revealing replica's clock may be ahead of
	// the drawing one's (NTP keeps hosts milliseconds apart; a second leaves
	// room for a commit finishing just past its deadline).
	RevealClockMargin = time.Second
)

// Dispatcher makes the synchronous wallet credit of a committed batch's
// rewards (services/luckydraw/luckyoutbox implements it). The draw
// transaction writes each reward_credit row "RewardCredit:{reward_id}" of
// lucky_outbox already claimed for ClaimedBy() (status processing,
// lock_until_ms = next_retry_at_ms = the draw + 2*WalletCreditTimeout +
// 1s), so the synchronous credit costs no commit of its own and the worker
// takes a row over only once that claim lapses. CreditRewards is called
// once per committed batch with the rewards of its paying draws: it calls
// the wallet and commits the outcomes before it returns, one per reward:
// status "granted" (with the wallet's receipt, the draw row already
// reward_status='granted'), "pending" (the outbox worker retries) or
// "failed"; an error means the outcome is unknown to the caller, the
// reward left to the worker.
type Dispatcher interface {
	ClaimedBy() string
	CreditRewards(ctx context.Context, appCode string, rewardIDs []string) []luckyoutbox.CreditOutcome
}

// Config configures a Service. Zero values are the defaults, except
// AuditKey, which is required. The three Disable* switches are the
// negated start values of LUCKY-14's global kill switches (so the zero
// value is "on"); an operator override in lucky_switches wins over them.
type Config struct {
	// AppCode is the app_code of requests whose meta.app_code is empty.
	AppCode string
	// DrawTimeout bounds one draw transaction, lock waits and retries of
	// deadlocks included. Time a request waits for its batch to start is
	// bounded by the caller's deadline, not by this. Default 300ms.
	DrawTimeout time.Duration
	// WalletCreditTimeout bounds one synchronous credit; the reward_credit
	// outbox row becomes due 2*WalletCreditTimeout+1s after the draw, so
	// the outbox worker does not race the synchronous dispatch.
	// Default 500ms.
	WalletCreditTimeout time.Duration
	// AuditKey is the HMAC-SHA256 key of random_digest. Required; never
	// logged.
	AuditKey string
	// LargeTierMinReward: a tier paying at least this many coins is large
	// and switched off while large_tier_enabled is off. 0: none is large.
	LargeTierMinReward int64
	// MaxDeviceDailyPayout caps the coins one device wins per UTC day
	// (across gifts). 0: no cap.
	MaxDeviceDailyPayout int64
	// MaxAnchorDailyPayout caps the coins won on gifts to one target user
	// per UTC day. 0: no cap.
	MaxAnchorDailyPayout int64
	// ActivityPeriodPayout caps the coins won in
	// [ActivityPeriodStartMs, ActivityPeriodEndMs). 0: no cap.
	ActivityPeriodPayout  int64
	ActivityPeriodStartMs int64
	ActivityPeriodEndMs   int64
	// DisableGlobalLuckyGift, DisableLargeTier and
	// DisableWalletCreditDispatch are the start values of
	// global_lucky_gift_enabled, large_tier_enabled and
	// wallet_credit_dispatch, negated.
	DisableGlobalLuckyGift      bool
	DisableLargeTier            bool
	DisableWalletCreditDispatch bool
	// PilotMode is pilot_mode's start value (default off): while it is on,
	// only the pilot rooms (pilot_room overrides) draw; the others answer
	// room_not_in_pilot.
	PilotMode bool
	// SwitchCacheTTL is how long CheckLuckyGift and DispatchEnabled (the
	// outbox worker) reuse switch values read from lucky_switches; at most
	// 1s. Draws read them in their transaction, after the fence. Default 1s.
	SwitchCacheTTL time.Duration
	// MaxBatch is the most concurrent draws of one app_code run in one
	// transaction (group commit). Default 32 (a bigger batch holds the
	// locks longer and risks DrawTimeout on a busy host); 1 disables batching.
	MaxBatch int
	// PipelineDepth is how many batches of one app_code may be in flight:
	// 2 (the default) lets the next batch start while the one before it
	// commits (InnoDB releases row locks before the log flush); 1 runs
	// them one after another.
	PipelineDepth int
	// ReplacedVersionGrace: a request naming a rule version still draws it
	// while the version that replaced it became effective less than this
	// ago (unless it was paused or retired), so a routine publish rejects
	// nothing room-service checked just before. 0 (the zero value): no
	// grace; roomflow's lucky.replaced_version_grace defaults to 10s.
	// At most MaxReplacedVersionGrace.
	ReplacedVersionGrace time.Duration
	// Randomness is the mode (fairness.ModeCrypto, the default, or
	// fairness.ModeCommitReveal) of the days of FairnessAppCodes that no
	// `fairness schedule` covers, as the fairness writer stores them; a
	// draw uses its stored day's mode whatever this says.
	Randomness string
	// FairnessAppCodes are the apps whose days (a stored mode each) this
	// replica makes. Any other app draws in its stored day's mode, crypto
	// when it has none (counted); due seeds are revealed for every app.
	// Default [AppCode].
	FairnessAppCodes []string
	// FairnessKeys decrypts (and, for the writer, encrypts) the days'
	// seeds (FairnessKeysFrom: required when Randomness is commit_reveal,
	// checked where the service starts). nil: a stored commit-reveal day
	// cannot be drawn (fairness_not_committed, logged).
	FairnessKeys *fairness.Keyring
	// FairnessDayLength is the length of a fairness day: 24h (UTC days,
	// the default); shorter only for demos and tests.
	FairnessDayLength time.Duration
	// FairnessRevealGrace is how long after its day's end the writer
	// reveals a seed: at least DrawTimeout + RevealClockMargin, so every
	// draw of the day has committed. Default 1h.
	FairnessRevealGrace time.Duration
	// OutboxFormat is lucky.outbox_format: luckyoutbox.FormatRows (a
	// lucky_outbox row per event) or FormatDrawEvents (one
	// lucky_draw_events row per draw). Default rows.
	OutboxFormat string
	// PoolConns is the most open connections of the MySQL pool
	// (mysql.max_open_conns; New reads its db's when 0): at least 2, since a
	// draw's transaction holds one connection while a rule version it has
	// not cached yet is loaded on another, and with one every draw timed
	// out.
	PoolConns int
	// Dispatcher credits rewards synchronously after commit. nil: rewards
	// stay pending for the outbox worker.
	Dispatcher Dispatcher
	// TLS secures Serve's listener (internal/tlsx: mutual TLS, callers
	// admitted by certificate name, certificates re-read on change); its
	// refusals are counted as roomflow_rpc_refused_total{listener=
	// "lucky.grpc_addr"}. nil: plaintext (roomflow_rpc_insecure is 1 and a
	// WARN is logged when the listener is not loopback).
	TLS *tlsx.Server
	// Registerer gets the roomflow_lucky_draw_* metrics. nil: none.
	Registerer prometheus.Registerer
	// Logger gets the service's lines. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock of draws, windows and rule activation. Default
	// time.Now.
	Now func() time.Time
	// Random, tests only: when set, each draw's random value (a ppm in
	// [0, 1,000,000)) is its result instead of the random source's, so a
	// test feeds the service and the rule simulator the same values.
	Random func() (int64, error)
}

func (c *Config) setDefaults() {
	cfgerr.Default(&c.DrawTimeout, DefaultDrawTimeout)
	cfgerr.Default(&c.WalletCreditTimeout, DefaultWalletCreditTimeout)
	cfgerr.Default(&c.SwitchCacheTTL, DefaultSwitchCacheTTL)
	cfgerr.Default(&c.MaxBatch, DefaultMaxBatch)
	cfgerr.Default(&c.PipelineDepth, DefaultPipelineDepth)
	cfgerr.Default(&c.OutboxFormat, luckyoutbox.FormatRows)
	cfgerr.Default(&c.Logger, slog.Default())
	cfgerr.Default(&c.Randomness, fairness.ModeCrypto)
	cfgerr.Default(&c.FairnessDayLength, DefaultFairnessDayLength)
	cfgerr.Default(&c.FairnessRevealGrace, DefaultFairnessRevealGrace)
	if len(c.FairnessAppCodes) == 0 && c.AppCode != "" {
		c.FairnessAppCodes = []string{c.AppCode}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Validate reports every invalid field of c with its defaults applied,
// keyed by snake-case name: audit_key (empty), draw_timeout,
// wallet_credit_timeout, switch_cache_ttl (above 1s), max_batch, the
// negative caps, activity_period_end_ms (not after the start), app_code
// (over 32 bytes), replaced_version_grace (outside 0-5m), randomness,
// fairness.app_codes, fairness.day_length (not a whole number of seconds
// dividing 24h), fairness.reveal_grace (below draw_timeout +
// RevealClockMargin), outbox_format (neither rows nor draw_events).
func (c Config) Validate() error {
	c.setDefaults()
	var ch cfgerr.Checks
	ch.Set("audit_key", c.AuditKey)
	ch.PositiveDuration("draw_timeout", c.DrawTimeout)
	ch.PositiveDuration("wallet_credit_timeout", c.WalletCreditTimeout)
	ch.PositiveDuration("switch_cache_ttl", c.SwitchCacheTTL)
	if c.SwitchCacheTTL > time.Second {
		ch.Bad("switch_cache_ttl", "must be at most 1s (got %s)", c.SwitchCacheTTL)
	}
	checkGrace(&ch, c.ReplacedVersionGrace)
	ch.Positive("max_batch", c.MaxBatch)
	ch.Positive("pipeline_depth", c.PipelineDepth)
	if c.PoolConns == 1 {
		ch.Bad("pool_conns", "must be at least 2: a draw's transaction holds a connection while it loads its rule version on another, so every draw would time out (got 1)")
	}
	checkFairness(&ch, c)
	if err := luckyoutbox.CheckFormat(c.OutboxFormat); err != nil {
		ch.Bad("outbox_format", "%v", err)
	}
	if len(c.AppCode) > maxAppCode {
		ch.Bad("app_code", "longer than %d bytes", maxAppCode)
	}
	if c.LargeTierMinReward < 0 {
		ch.Bad("large_tier_min_reward", "must be >= 0 (got %d)", c.LargeTierMinReward)
	}
	c.caps().check(&ch)
	return ch.Err()
}

// check reports c's negative caps and an activity period that ends before
// it starts.
func (c Caps) check(ch *cfgerr.Checks) {
	for _, f := range []struct {
		key string
		v   int64
	}{
		{"max_device_daily_payout", c.MaxDeviceDailyPayout},
		{"max_anchor_daily_payout", c.MaxAnchorDailyPayout},
		{"activity_period_payout", c.ActivityPeriodPayout},
		{"activity_period_start_ms", c.ActivityPeriodStartMs},
	} {
		if f.v < 0 {
			ch.Bad(f.key, "must be >= 0 (got %d)", f.v)
		}
	}
	if (c.ActivityPeriodStartMs != 0 || c.ActivityPeriodEndMs != 0 || c.ActivityPeriodPayout != 0) &&
		c.ActivityPeriodEndMs <= c.ActivityPeriodStartMs {
		ch.Bad("activity_period_end_ms", "must be after activity_period_start_ms (got %d <= %d)", c.ActivityPeriodEndMs, c.ActivityPeriodStartMs)
	}
}

// checkGrace requires a replaced-version grace of 0 to
// MaxReplacedVersionGrace.
func checkGrace(ch *cfgerr.Checks, d time.Duration) {
	if d < 0 || d > MaxReplacedVersionGrace {
		ch.Bad("replaced_version_grace", "must be between 0 and %s (got %s)", MaxReplacedVersionGrace, d)
	}
}

// checkFairness checks the fairness fields: a known mode, a day length that divides 24h in whole seconds (so short
// days never straddle a UTC day), a grace that outlasts every draw of the day (RevealClockMargin).
func checkFairness(ch *cfgerr.Checks, c Config) {
	if !fairness.ValidMode(c.Randomness) {
		ch.Bad("randomness", "must be %s or %s (got %q)", fairness.ModeCrypto, fairness.ModeCommitReveal, c.Randomness)
	}
	if d := c.FairnessDayLength; d < time.Second || d%time.Second != 0 || (24*time.Hour)%d != 0 {
		ch.Bad("fairness.day_length", "must be a whole number of seconds dividing 24h (got %s)", d)
	}
	if least := c.DrawTimeout + RevealClockMargin; c.FairnessRevealGrace < least {
		ch.Bad("fairness.reveal_grace", "must be at least draw_timeout + %s = %s, so a day's draws have committed before its seed is revealed (got %s)",
			RevealClockMargin, least, c.FairnessRevealGrace)
	}
	for _, a := range c.FairnessAppCodes {
		if a == "" || len(a) > maxAppCode {
			ch.Bad("fairness.app_codes", "has an app_code that is empty or longer than %d bytes", maxAppCode)
		}
	}
}
