package luckydraw

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hyapp/roomflow/domain/fairness"
)

// The operator's side of provably fair draws: the schedule of modes and
// the verification of a revealed day (`roomflow lucky fairness`).

// ErrSchedule is a `fairness schedule` refused: a day not after today, or
// one whose mode is already stored.
var ErrSchedule = errors.New("luckydraw: schedule refused")

// ScheduleFairness stores mode for app's days from fromMs on (a day
// start), as an operator change logged to lucky_admin_log in its own
// transaction (old: the mode the schedule gave that day before). It
// refuses (ErrSchedule) today, a past day, and a day at or after fromMs
// already stored (its mode and commitment are fixed). The insert comes
// first and the stored days are then read with a locking read, so a
// writer making one of those days meanwhile either waits for this or is
// seen by it. The draws do not read the schedule for a stored day, so it
// takes no fence.
func (a *Admin) ScheduleFairness(ctx context.Context, app, mode string, fromMs int64, dayLength time.Duration) (Change, error) {
	if !fairness.ValidMode(mode) {
		return Change{}, fmt.Errorf("%w: --mode must be crypto or commit_reveal (got %q)", ErrSchedule, mode)
	}
	label := fairness.DayLabel(fromMs, dayLength)
	if fromMs <= fairness.DayStartMs(a.cfg.Now().UnixMilli(), dayLength) {
		return Change{}, fmt.Errorf("%w: --from %s is today or a past day: only days after today can be scheduled", ErrSchedule, label)
	}
	out, err := a.logged(ctx, func(tx *sql.Tx, nowMs int64) ([]Change, error) {
		c := Change{AppCode: app, Command: "fairness schedule", Target: "days from " + label, New: mode}
		err := tx.QueryRowContext(ctx, `SELECT mode FROM lucky_fairness_schedule WHERE app_code = ? AND from_day_ms <= ?
	ORDER BY from_day_ms DESC LIMIT 1`, app, fromMs).Scan(&c.Old)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return nil, err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO lucky_fairness_schedule (app_code, from_day_ms, mode, operator, created_at_ms) VALUES (?, ?, ?, ?, ?)
	ON DUPLICATE KEY UPDATE mode = VALUES(mode), operator = VALUES(operator), created_at_ms = VALUES(created_at_ms)`,
			app, fromMs, mode, a.cfg.Operator, nowMs); err != nil {
			return nil, err
		}
		var stored string
		err = tx.QueryRowContext(ctx, `SELECT day_label FROM lucky_fairness_days WHERE app_code = ? AND day_start_ms >= ? ORDER BY day_start_ms
	LIMIT 1 FOR UPDATE`, app, fromMs).Scan(&stored)
		switch {
		case err == nil:
			return nil, fmt.Errorf("%w: day %s of %s is already committed (its mode is fixed): schedule a later --from", ErrSchedule, stored, app)
		case !errors.Is(err, sql.ErrNoRows):
			return nil, err
		}
		return []Change{c}, nil
	})
	if err != nil {
		return Change{}, err
	}
	return out[0], nil
}

// ErrNotVerifiable is a day `fairness verify` cannot check: none stored,
// drawn in crypto mode, or not revealed yet.
var ErrNotVerifiable = errors.New("luckydraw: day not verifiable")

// FairnessVerify is what VerifyFairnessDay found.
type FairnessVerify struct {
	Day         string
	Commitment  string
	Draws       int      // commit-reveal draws recomputed (rejections skipped)
	Differences []string // one line each
}

// VerifyFairnessDay recomputes every draw of app's revealed day starting
// at dayMs from MySQL and the revealed seed: the seed against its
// commitment, each draw's random value, its tier from its stored
// candidate table, its mode, and each user's nonces (1, 2, … without
// gaps). Rejections are skipped.
func VerifyFairnessDay(ctx context.Context, db *sql.DB, app string, dayMs int64) (FairnessVerify, error) {
	var v FairnessVerify
	var mode string
	var end int64
	var revealed sql.NullString
	err := db.QueryRowContext(ctx, `SELECT day_label, day_end_ms, mode, commitment, revealed_seed FROM lucky_fairness_days
	WHERE app_code = ? AND day_start_ms = ?`, app, dayMs).Scan(&v.Day, &end, &mode, &v.Commitment, &revealed)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return v, fmt.Errorf("%w: %s has no fairness day starting %s", ErrNotVerifiable, app, time.UnixMilli(dayMs).UTC().Format(time.RFC3339))
	case err != nil:
		return v, err
	case mode != fairness.ModeCommitReveal:
		return v, fmt.Errorf("%w: day %s of %s was drawn in %s mode: there is no seed to verify against", ErrNotVerifiable, v.Day, app, mode)
	case !revealed.Valid:
		return v, fmt.Errorf("%w: the seed of day %s of %s is not revealed yet", ErrNotVerifiable, v.Day, app)
	}
	seed, err := hex.DecodeString(revealed.String)
	if err != nil || fairness.Commitment(seed) != v.Commitment {
		v.Differences = append(v.Differences, "the revealed seed does not hash to the commitment")
	}
	rows, err := db.QueryContext(ctx, `SELECT draw_id, client_seed, sender_user_id, nonce, fairness_mode, random_value, candidate_tiers_json,
	selected_tier_id FROM lucky_draw_records WHERE app_code = ? AND created_at_ms >= ? AND created_at_ms < ? AND reward_status <> ?
	ORDER BY sender_user_id, nonce`, app, dayMs, end, RewardRejected)
	if err != nil {
		return v, err
	}
	var lastUser, lastNonce int64
	err = eachRow(rows, func(rs *sql.Rows) error {
		var id, drawMode, cands, tier string
		var in fairness.Input
		var stored int64
		if err := rs.Scan(&id, &in.ClientSeed, &in.SenderUserID, &in.Nonce, &drawMode, &stored, &cands, &tier); err != nil {
			return err
		}
		in.AppCode = app
		v.Draws++
		if in.SenderUserID != lastUser {
			lastUser, lastNonce = in.SenderUserID, 0
		}
		if in.Nonce != lastNonce+1 {
			v.Differences = append(v.Differences, fmt.Sprintf("%s: user %d nonce %d follows %d", id, in.SenderUserID, in.Nonce, lastNonce))
		}
		lastNonce = in.Nonce
		v.Differences = append(v.Differences, verifyDraw(id, seed, in, drawMode, stored, cands, tier)...)
		return nil
	})
	return v, err
}

// verifyDraw recomputes one draw: its mode, random value and tier.
func verifyDraw(id string, seed []byte, in fairness.Input, mode string, stored int64, candJSON, tier string) []string {
	if mode != fairness.ModeCommitReveal {
		return []string{fmt.Sprintf("%s: drawn in %s mode on a commit-reveal day", id, mode)}
	}
	var out []string
	random := fairness.RandomPPM(seed, in)
	if random != stored {
		out = append(out, fmt.Sprintf("%s: random value %d, the seed gives %d", id, stored, random))
	}
	var cands []Candidate
	if err := json.Unmarshal([]byte(candJSON), &cands); err != nil {
		return append(out, fmt.Sprintf("%s: candidate table: %v", id, err))
	}
	i, err := Select(cands, random)
	switch {
	case err != nil:
		out = append(out, fmt.Sprintf("%s: %v", id, err))
	case cands[i].TierID != tier:
		out = append(out, fmt.Sprintf("%s: tier %s, the table and value select %s", id, tier, cands[i].TierID))
	}
	return out
}
