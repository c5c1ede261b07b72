package luckydraw

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/hyapp/roomflow/domain/lucky"
	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/mysqlerr"
	"github.com/hyapp/roomflow/schemas/envelope"
	"github.com/hyapp/roomflow/services/luckydraw/luckyoutbox"
)

// ErrRuleImmutable is a PublishRule of an existing version with other
// content: published versions never change (replays and audits rely on
// it); publish a new version instead.
var ErrRuleImmutable = errors.New("luckydraw: rule version already published with other content")

// ErrStatusRefused is a rules status change refused: a version in effect
// cannot go back to draft. Nothing was changed.
var ErrStatusRefused = errors.New("luckydraw: rule status change refused")

// DefaultAdminWait is AdminConfig.Wait's default.
const DefaultAdminWait = 5 * time.Second

// AdminConfig configures an Admin. Zero values are the defaults.
type AdminConfig struct {
	// Operator and Host say who makes the changes. Defaults: $USER and
	// the host name.
	Operator, Host string
	// Wait bounds how long a change waits for the fence and every other
	// lock (whole seconds, rounded up). Default 5s; 1s to 1h.
	Wait time.Duration
	// ReplacedVersionGrace is the draw service's (Config): publish and
	// the tidy-up retire a replaced version only once it is over.
	ReplacedVersionGrace time.Duration
	// LargeTierMinReward is the draw service's (Config): the warnings of
	// large_tier_enabled and rules publish name it.
	LargeTierMinReward int64
	// PilotMode is the draw service's pilot_mode start value (Config): the
	// warning of an empty pilot list reads it when no override is stored.
	PilotMode bool
	// PublishPayoutBandPPM is lucky.publish_payout_band_ppm: how far a
	// published table's analytic payout rate may lie from its target
	// (CheckPublishBand); 0 = no check (not a default: zero is off).
	PublishPayoutBandPPM int64
	// Logger gets the tidy-up's lines. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock of the changes. Default time.Now.
	Now func() time.Time
}

func (c *AdminConfig) setDefaults() {
	cfgerr.Default(&c.Operator, os.Getenv("USER"))
	if c.Host == "" {
		c.Host, _ = os.Hostname()
	}
	cfgerr.Default(&c.Wait, DefaultAdminWait)
	cfgerr.Default(&c.Logger, slog.Default())
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Validate reports every invalid field of c, keyed by snake-case name:
// replaced_version_grace (outside 0-5m), operator (over 64 bytes), wait
// (outside 1s-1h), publish_payout_band_ppm (outside 0-1,000,000).
func (c AdminConfig) Validate() error {
	c.setDefaults()
	var ch cfgerr.Checks
	if c.Wait < time.Second || c.Wait > time.Hour {
		ch.Bad("wait", "must be between 1s and 1h (got %s)", c.Wait)
	}
	checkGrace(&ch, c.ReplacedVersionGrace)
	if c.PublishPayoutBandPPM < 0 || c.PublishPayoutBandPPM > lucky.PPM {
		ch.Bad("publish_payout_band_ppm", "must be between 0 (off) and 1000000 (got %d)", c.PublishPayoutBandPPM)
	}
	if len(c.Operator) > 64 {
		ch.Bad("operator", "longer than 64 bytes")
	}
	return ch.Err()
}

// Admin makes the operator changes of `roomflow lucky`: switches, rule
// publishes and statuses, pool funding, reward re-drives and the
// start-time tidy-up of rule statuses. Each is one transaction behind the
// fence (see change) that also writes who made which change, from what
// to what, to lucky_admin_log; retried whole on a deadlock.
type Admin struct {
	db  *sql.DB
	cfg AdminConfig
}

// NewAdmin returns an Admin over db (migrated). It fails when cfg is
// invalid (see AdminConfig.Validate).
func NewAdmin(db *sql.DB, cfg AdminConfig) (*Admin, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Admin{db: db, cfg: cfg}, nil
}

// Change is one operator change: command (switch, tier, rules publish, rules
// status, rules tidy, pools fund), its target and the old and new value.
// Note, when set, says what the change does not do.
type Change struct {
	AppCode, Command, Target, Old, New string
	Note                               string
	// Warning, when set, says why the change may not do what the
	// operator expects (`roomflow lucky` prints it as a WARNING line).
	Warning string
}

// adminAttempts bounds the retries of an operator change.
const adminAttempts = 5

// ErrFenceWait is an operator change that waited AdminConfig.Wait for the
// fence (draw batches or another change holding it) and gave up: nothing
// was changed. Its message names the blocking connections.
var ErrFenceWait = errors.New("luckydraw: the fence stayed locked")

// change runs fn as one operator change: one transaction whose first
// statement takes the fence (lucky_fence) exclusively, so it waits for the
// draw batches that read the old state to commit and the batches after it
// read the new one; the command returns only once that is so, on every
// replica. Every lock wait of the change is bounded by Wait
// (innodb_lock_wait_timeout on its own connection, whole seconds); it is
// retried whole on a deadlock (fn re-reads what it decides on).
func (a *Admin) change(ctx context.Context, fn func(tx *sql.Tx, nowMs int64) ([]Change, error)) ([]Change, error) {
	return a.run(ctx, true, fn)
}

// logged runs fn like change but without the fence, for changes to rows a
// draw batch locks itself (pool rows: funding waits for the batches that
// hold them, and batches after it read the new balance) or never reads
// (the reward outbox): taking the fence would stall every draw for each
// pool an operator funds.
func (a *Admin) logged(ctx context.Context, fn func(tx *sql.Tx, nowMs int64) ([]Change, error)) ([]Change, error) {
	return a.run(ctx, false, fn)
}

func (a *Admin) run(ctx context.Context, fence bool, fn func(tx *sql.Tx, nowMs int64) ([]Change, error)) ([]Change, error) {
	conn, err := a.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	var id int64
	if err := conn.QueryRowContext(ctx, `SELECT CONNECTION_ID()`).Scan(&id); err != nil {
		return nil, err
	}
	if _, err := conn.ExecContext(ctx, `SET SESSION innodb_lock_wait_timeout = ?`, int64((a.cfg.Wait+time.Second-1)/time.Second)); err != nil {
		return nil, err
	}
	// The connection goes back to the pool: its next user gets the server's wait.
	defer conn.ExecContext(context.WithoutCancel(ctx), `SET SESSION innodb_lock_wait_timeout = DEFAULT`) //nolint:errcheck // a failure closes the connection anyway
	var out []Change
	err = mysqlerr.InTx(ctx, conn, nil, adminAttempts, func(tx *sql.Tx) error {
		nowMs := a.cfg.Now().UnixMilli()
		if fence {
			if err := a.takeFence(ctx, tx, id, nowMs); err != nil {
				return err
			}
		}
		var err error
		if out, err = fn(tx, nowMs); err != nil {
			return err
		}
		return a.logChanges(ctx, tx, nowMs, out)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// logChanges writes cs to lucky_admin_log with who made them.
func (a *Admin) logChanges(ctx context.Context, tx *sql.Tx, nowMs int64, cs []Change) error {
	var rows [][]any
	for _, c := range cs {
		rows = append(rows, []any{c.AppCode, a.cfg.Operator, envelope.Clip(a.cfg.Host, 255), c.Command, envelope.Clip(c.Target, 200),
			envelope.Clip(c.Old, 255), envelope.Clip(c.New, 255), nowMs})
	}
	return insertRows(ctx, tx, `INSERT INTO lucky_admin_log (app_code, operator, host, command, target, old_value, new_value,
	created_at_ms) VALUES `, rows)
}

// LogEntry is a lucky_admin_log row.
type LogEntry struct {
	Change
	Operator, Host string
	AtMs           int64
}

// AdminLog returns the operator changes logged at or after sinceMs, oldest
// first (`roomflow lucky admin-log`).
func (a *Admin) AdminLog(ctx context.Context, sinceMs int64) ([]LogEntry, error) {
	rows, err := a.db.QueryContext(ctx, `SELECT app_code, operator, host, command, target, old_value, new_value, created_at_ms
FROM lucky_admin_log WHERE created_at_ms >= ? ORDER BY created_at_ms, id`, sinceMs)
	if err != nil {
		return nil, fmt.Errorf("luckydraw: read lucky_admin_log: %w", err)
	}
	defer rows.Close()
	var out []LogEntry
	for rows.Next() {
		var e LogEntry
		if err := rows.Scan(&e.AppCode, &e.Operator, &e.Host, &e.Command, &e.Target, &e.Old, &e.New, &e.AtMs); err != nil {
			return nil, fmt.Errorf("luckydraw: read lucky_admin_log: %w", err)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// retryChunk is how many failed rewards one rewards retry transaction
// re-drives.
const retryChunk = 500

// RetryFailedRewards re-drives the failed rewards of appCode ("" = every
// app) back to pending (luckyoutbox.RetryFailedTx), one change of at most
// 500 rewards per transaction, each logged; it returns how many.
func (a *Admin) RetryFailedRewards(ctx context.Context, appCode string) (int, error) {
	total := 0
	for {
		var n int
		_, err := a.logged(ctx, func(tx *sql.Tx, nowMs int64) ([]Change, error) {
			var err error
			n, err = luckyoutbox.RetryFailedTx(ctx, tx, appCode, retryChunk, nowMs)
			return []Change{{AppCode: appCode, Command: "rewards retry", Target: "failed rewards",
				Old: fmt.Sprintf("%d failed", n), New: fmt.Sprintf("%d pending", n)}}, err
		})
		if err != nil {
			return total, fmt.Errorf("luckydraw: retry failed rewards: %w", err)
		}
		total += n
		if n < retryChunk {
			return total, nil
		}
	}
}

// takeFence updates the fence row in tx (connection id), noting every
// 100ms which connections it waits for, to name them if it gives up.
func (a *Admin) takeFence(ctx context.Context, tx *sql.Tx, id, nowMs int64) error {
	stop, watched := make(chan struct{}), make(chan []string, 1)
	go func() {
		var last []string
		defer func() { watched <- last }()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if b := a.blockers(ctx, id); len(b) > 0 {
					last = b
				}
			}
		}
	}()
	res, err := tx.ExecContext(ctx, `UPDATE lucky_fence SET version = version + 1, updated_at_ms = ? WHERE id = 1`, nowMs)
	close(stop)
	blockers := <-watched
	var me *mysql.MySQLError
	switch {
	case errors.As(err, &me) && me.Number == 1205:
		if len(blockers) == 0 {
			blockers = []string{"(not seen: it held the fence less than 100ms)"}
		}
		// Not wrapped: a lock wait timeout is retryable, this is not.
		return fmt.Errorf("%w for %s (--wait), blocked by %s; nothing was changed", ErrFenceWait, a.cfg.Wait, strings.Join(blockers, "; "))
	case err != nil:
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("luckydraw: lucky_fence has no row (run roomflow migrate): %v", err)
	}
	return nil
}

// blockerQueries list the connections blocking connection ? on an InnoDB
// lock: MariaDB's information_schema, then MySQL 8's performance_schema.
var blockerQueries = []string{
	`SELECT b.trx_mysql_thread_id, COALESCE(p.USER, ''), COALESCE(p.HOST, ''), COALESCE(p.COMMAND, ''),
	TIMESTAMPDIFF(SECOND, b.trx_started, NOW()), COALESCE(LEFT(p.INFO, 120), '')
FROM information_schema.INNODB_LOCK_WAITS w
JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id
JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id
LEFT JOIN information_schema.PROCESSLIST p ON p.ID = b.trx_mysql_thread_id
WHERE r.trx_mysql_thread_id = ?`,
	`SELECT b.trx_mysql_thread_id, COALESCE(p.USER, ''), COALESCE(p.HOST, ''), COALESCE(p.COMMAND, ''),
	TIMESTAMPDIFF(SECOND, b.trx_started, NOW()), COALESCE(LEFT(p.INFO, 120), '')
FROM performance_schema.data_lock_waits w
JOIN information_schema.INNODB_TRX r ON r.trx_id = w.REQUESTING_ENGINE_TRANSACTION_ID
JOIN information_schema.INNODB_TRX b ON b.trx_id = w.BLOCKING_ENGINE_TRANSACTION_ID
LEFT JOIN information_schema.PROCESSLIST p ON p.ID = b.trx_mysql_thread_id
WHERE r.trx_mysql_thread_id = ?`,
}

// blockers describes the connections connection id waits for; nothing
// when it waits for none or they cannot be read.
func (a *Admin) blockers(ctx context.Context, id int64) []string {
	for _, q := range blockerQueries {
		rows, err := a.db.QueryContext(ctx, q, id)
		if err != nil {
			continue
		}
		var out []string
		for rows.Next() {
			var thread, age int64
			var user, host, command, info string
			if rows.Scan(&thread, &user, &host, &command, &age, &info) == nil {
				d := fmt.Sprintf("connection %d (%s@%s, %s, transaction open %ds", thread, user, host, command, age)
				if info != "" {
					d += ", running " + strconv.Quote(info)
				}
				out = append(out, d+")")
			}
		}
		rows.Close()
		slices.Sort(out)
		return slices.Compact(out)
	}
	return nil
}

// PublishRule validates r (CheckNewRule: lucky.Rule.Validate, exactly one
// none tier and ids the tables hold, errors wrapping ErrRuleInvalid) and
// inserts the version with its tiers, then retires the gift's versions
// that no longer draw (staleVersions), in one transaction. Publishing a version that exists with the same
// content (status and tier enabled aside: those change at run time) is a
// no-op; with any other content it is ErrRuleImmutable.
func (a *Admin) PublishRule(ctx context.Context, r lucky.Rule) ([]Change, error) {
	if err := CheckNewRule(&r); err != nil {
		return nil, err
	}
	target := r.GiftID + "/" + r.RuleVersion
	return a.change(ctx, func(tx *sql.Tx, nowMs int64) ([]Change, error) {
		existing, err := loadRuleTx(ctx, tx, r.GiftID, r.RuleVersion)
		if err != nil {
			return nil, err
		}
		if existing != nil {
			if sameRule(existing, &r) {
				return []Change{{Command: "rules publish", Target: target, Old: "published", New: "published",
					Note: "already published with this content: nothing changed"}}, nil
			}
			return nil, fmt.Errorf("%w: %s", ErrRuleImmutable, target)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO lucky_gift_rules (gift_id, rule_version, gift_price, pool_rate_ppm,
	target_payout_rate_ppm, platform_weight_ppm, room_weight_ppm, max_single_payout, max_user_daily_payout,
	max_room_hourly_payout, status, effective_at_ms, created_at_ms, updated_at_ms)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, r.GiftID, r.RuleVersion, r.GiftPrice, r.PoolRatePPM,
			r.TargetPayoutRatePPM, r.PlatformWeightPPM, r.RoomWeightPPM, r.MaxSinglePayout, r.MaxUserDailyPayout,
			r.MaxRoomHourlyPayout, r.Status, r.EffectiveAtMs, nowMs, nowMs); err != nil {
			return nil, fmt.Errorf("luckydraw: publish rule %s: %w", target, err)
		}
		for _, t := range r.Tiers {
			if _, err := tx.ExecContext(ctx, `INSERT INTO lucky_reward_tiers (gift_id, rule_version, tier_id, reward_type,
	reward_value, probability_ppm, min_pool_balance, enabled, large) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
				r.GiftID, r.RuleVersion, t.TierID, t.RewardType, t.RewardValue, t.ProbabilityPPM, t.MinPoolBalance, t.Enabled, t.Large); err != nil {
				return nil, fmt.Errorf("luckydraw: publish rule %s tier %s: %w", target, t.TierID, err)
			}
		}
		out := []Change{{Command: "rules publish", Target: target,
			New:     fmt.Sprintf("%s, effective %s, %d tiers", r.Status, msTime(r.EffectiveAtMs), len(r.Tiers)),
			Warning: a.unmarkedLargeWarning(&r)}}
		retired, err := a.retireStale(ctx, tx, nowMs, r.GiftID)
		return append(out, retired...), err
	})
}

// retireStale sets the versions of gift ("": every gift) that no longer
// draw (staleVersions) to retired.
func (a *Admin) retireStale(ctx context.Context, tx *sql.Tx, nowMs int64, gift string) ([]Change, error) {
	q := `SELECT gift_id, rule_version, status, effective_at_ms, id FROM lucky_gift_rules`
	var args []any
	if gift != "" {
		q += ` WHERE gift_id = ?`
		args = append(args, gift)
	}
	byGift, err := scanRuleRows(tx.QueryContext(ctx, q+` ORDER BY gift_id`, args...))
	if err != nil {
		return nil, fmt.Errorf("luckydraw: read rule versions: %w", err)
	}
	var out []Change
	for _, g := range slices.Sorted(maps.Keys(byGift)) {
		for _, v := range staleVersions(byGift[g], nowMs, a.cfg.ReplacedVersionGrace.Milliseconds()) {
			old := ""
			for _, r := range byGift[g] {
				if r.version == v {
					old = r.status
				}
			}
			if _, err := tx.ExecContext(ctx, `UPDATE lucky_gift_rules SET status = 'retired', updated_at_ms = ?
WHERE gift_id = ? AND rule_version = ?`, nowMs, g, v); err != nil {
				return nil, fmt.Errorf("luckydraw: retire %s/%s: %w", g, v, err)
			}
			out = append(out, Change{Command: "rules tidy", Target: g + "/" + v, Old: old, New: "retired",
				Note: "replaced: it no longer draws"})
		}
	}
	return out, nil
}

// TidyRuleStatuses retires every version that no longer draws (older than
// its gift's deciding version, past the grace), one transaction for all
// gifts, and logs one INFO line per gift it changed. `roomflow lucky`
// runs it at start, so `rules show` and the statuses agree.
func (a *Admin) TidyRuleStatuses(ctx context.Context) ([]Change, error) {
	out, err := a.change(ctx, func(tx *sql.Tx, nowMs int64) ([]Change, error) {
		return a.retireStale(ctx, tx, nowMs, "")
	})
	if err != nil {
		return nil, err
	}
	byGift := map[string][]string{}
	for _, c := range out {
		g, v, _ := strings.Cut(c.Target, "/")
		byGift[g] = append(byGift[g], v)
	}
	for _, g := range slices.Sorted(maps.Keys(byGift)) {
		a.cfg.Logger.Info("lucky rule versions that no longer draw retired", "gift_id", g, "versions", byGift[g])
	}
	return out, nil
}

// loadRuleTx reads a version with its tiers in tier_id order, nil if
// absent.
func loadRuleTx(ctx context.Context, tx *sql.Tx, gift, version string) (*lucky.Rule, error) {
	r := &lucky.Rule{}
	err := tx.QueryRowContext(ctx, `SELECT gift_id, rule_version, gift_price, pool_rate_ppm, target_payout_rate_ppm,
	platform_weight_ppm, room_weight_ppm, max_single_payout, max_user_daily_payout, max_room_hourly_payout, status,
	effective_at_ms FROM lucky_gift_rules WHERE gift_id = ? AND rule_version = ? FOR UPDATE`, gift, version).Scan(
		&r.GiftID, &r.RuleVersion, &r.GiftPrice, &r.PoolRatePPM, &r.TargetPayoutRatePPM, &r.PlatformWeightPPM,
		&r.RoomWeightPPM, &r.MaxSinglePayout, &r.MaxUserDailyPayout, &r.MaxRoomHourlyPayout, &r.Status, &r.EffectiveAtMs)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("luckydraw: read rule %s/%s: %w", gift, version, err)
	}
	rows, err := tx.QueryContext(ctx, `SELECT tier_id, reward_type, reward_value, probability_ppm, min_pool_balance, enabled, large
FROM lucky_reward_tiers WHERE gift_id = ? AND rule_version = ? ORDER BY tier_id`, gift, version)
	if err != nil {
		return nil, fmt.Errorf("luckydraw: read tiers %s/%s: %w", gift, version, err)
	}
	defer rows.Close()
	for rows.Next() {
		var t lucky.Tier
		if err := rows.Scan(&t.TierID, &t.RewardType, &t.RewardValue, &t.ProbabilityPPM, &t.MinPoolBalance, &t.Enabled, &t.Large); err != nil {
			return nil, fmt.Errorf("luckydraw: read tiers %s/%s: %w", gift, version, err)
		}
		r.Tiers = append(r.Tiers, t)
	}
	return r, rows.Err()
}

// sameRule compares two versions' immutable content, tiers in tier_id
// order: status and a tier's enabled change at run time, so a republish of
// the same file after a pause is a no-op, not an edit.
func sameRule(a, b *lucky.Rule) bool {
	sorted := func(r *lucky.Rule) []lucky.Tier {
		ts := slices.Clone(r.Tiers)
		for i := range ts {
			ts[i].Enabled = false
		}
		slices.SortFunc(ts, func(x, y lucky.Tier) int {
			if x.TierID < y.TierID {
				return -1
			}
			if x.TierID > y.TierID {
				return 1
			}
			return 0
		})
		return ts
	}
	ac, bc := *a, *b
	ac.Tiers, bc.Tiers = nil, nil
	return ac.GiftID == bc.GiftID && ac.RuleVersion == bc.RuleVersion && ac.GiftPrice == bc.GiftPrice &&
		ac.PoolRatePPM == bc.PoolRatePPM && ac.TargetPayoutRatePPM == bc.TargetPayoutRatePPM &&
		ac.PlatformWeightPPM == bc.PlatformWeightPPM && ac.RoomWeightPPM == bc.RoomWeightPPM &&
		ac.MaxSinglePayout == bc.MaxSinglePayout && ac.MaxUserDailyPayout == bc.MaxUserDailyPayout &&
		ac.MaxRoomHourlyPayout == bc.MaxRoomHourlyPayout && ac.EffectiveAtMs == bc.EffectiveAtMs &&
		slices.Equal(sorted(a), sorted(b))
}

// SetRuleStatus changes a published version's status (draft, active,
// paused, retired: LUCKY-14's rule status switch). Pausing or
// retiring the deciding version stops its gift (no older version draws
// instead). Activating a version older than the deciding one changes
// nothing that draws: the change says so in its Note (to roll back,
// publish the old table as a new version). An unknown version is an
// error wrapping lucky.ErrUnknownRule, a version in effect set to draft
// ErrStatusRefused; nothing is written.
func (a *Admin) SetRuleStatus(ctx context.Context, giftID, version, status string) (Change, error) {
	if !slices.Contains([]string{"draft", "active", "paused", "retired"}, status) {
		return Change{}, fmt.Errorf("luckydraw: status %q is not draft, active, paused or retired", status)
	}
	target := giftID + "/" + version
	out, err := a.change(ctx, func(tx *sql.Tx, nowMs int64) ([]Change, error) {
		byGift, err := scanRuleRows(tx.QueryContext(ctx, `SELECT gift_id, rule_version, status, effective_at_ms, id
FROM lucky_gift_rules WHERE gift_id = ?`, giftID))
		if err != nil {
			return nil, fmt.Errorf("luckydraw: read rule versions: %w", err)
		}
		rows := byGift[giftID]
		i := slices.IndexFunc(rows, func(r ruleRow) bool { return r.version == version })
		if i < 0 {
			return nil, fmt.Errorf("%w: gift %q version %q", lucky.ErrUnknownRule, giftID, version)
		}
		// A draft is no candidate: drafting a version that has decided would
		// hand the gift back to an older version, the fallback pause avoids.
		if status == "draft" && rows[i].status != "draft" && rows[i].effectiveAt <= nowMs {
			return nil, fmt.Errorf("%w: %s is in effect since %s: pause or retire it (a draft is skipped, so an older version would draw)",
				ErrStatusRefused, target, msTime(rows[i].effectiveAt))
		}
		c := Change{Command: "rules status", Target: target, Old: rows[i].status, New: status}
		if _, err := tx.ExecContext(ctx, `UPDATE lucky_gift_rules SET status = ?, updated_at_ms = ? WHERE gift_id = ? AND rule_version = ?`,
			status, nowMs, giftID, version); err != nil {
			return nil, fmt.Errorf("luckydraw: set rule status: %w", err)
		}
		rows[i].status = status
		_, _, deciding := pickVersion(rows, "", nowMs, 0)
		if status == "active" && deciding != "" && deciding != version && rows[i].effectiveAt <= nowMs {
			c.Note = fmt.Sprintf("%s does not draw: %s decides (no fallback to older versions); to roll back, publish its table as a new version", target, deciding)
		}
		return []Change{c}, nil
	})
	if err != nil {
		return Change{}, err
	}
	return out[0], nil
}

// RuleVersions describes the versions of gift ("": every gift) at now:
// which draws, which are scheduled, why each other does not draw
// (`roomflow lucky rules show`). Newest first within a gift.
func (a *Admin) RuleVersions(ctx context.Context, gift string) ([]VersionState, error) {
	q := `SELECT gift_id, rule_version, status, effective_at_ms, id FROM lucky_gift_rules`
	var args []any
	if gift != "" {
		q += ` WHERE gift_id = ?`
		args = append(args, gift)
	}
	byGift, err := scanRuleRows(a.db.QueryContext(ctx, q, args...))
	if err != nil {
		return nil, fmt.Errorf("luckydraw: read rule versions: %w", err)
	}
	if gift != "" && len(byGift) == 0 {
		return nil, fmt.Errorf("%w: gift %q has no version", lucky.ErrUnknownRule, gift)
	}
	nowMs := a.cfg.Now().UnixMilli()
	var out []VersionState
	for _, g := range slices.Sorted(maps.Keys(byGift)) {
		out = append(out, explainVersions(byGift[g], nowMs, a.cfg.ReplacedVersionGrace.Milliseconds())...)
	}
	return out, nil
}
