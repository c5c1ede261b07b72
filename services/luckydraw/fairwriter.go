package luckydraw

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/domain/fairness"
	"github.com/hyapp/roomflow/internal/promreg"
	"github.com/hyapp/roomflow/schemas/activityv1"
)

// The fairness writer of `roomflow lucky`: it makes each listed app's
// days (today and tomorrow, so a day is committed about a day ahead), one
// writer per day through INSERT IGNORE, and reveals the seeds of every
// app's days ended lucky.fairness.reveal_grace ago; both emit their event
// through lucky_outbox in the same transaction.

// fairnessGauge is roomflow_lucky_fairness_next_day_committed.
func fairnessGauge(reg prometheus.Registerer) *prometheus.GaugeVec {
	return promreg.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "roomflow_lucky_fairness_next_day_committed",
		Help: "1 when the next fairness day of the app is stored (with its seed's commitment in commit-reveal mode), else 0."}, []string{"app_code"}))
}

// fairnessTick is how often RunFairness steps: often enough for short
// demo days.
func (s *Service) fairnessTick() time.Duration {
	return min(time.Minute, max(s.cfg.FairnessDayLength/10, 100*time.Millisecond))
}

// RunFairness steps the fairness writer until ctx ends. A failed step is
// logged and retried at the next tick (the gauge shows a missing day).
func (s *Service) RunFairness(ctx context.Context) error {
	t := time.NewTicker(s.fairnessTick())
	defer t.Stop()
	for {
		if err := s.FairnessStep(ctx, s.cfg.Now()); err != nil && ctx.Err() == nil {
			s.log.Warn("fairness writer step failed; retried", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// FairnessStep makes today's and tomorrow's day of every listed app (at
// now) and reveals the seeds that are due, listed or not.
func (s *Service) FairnessStep(ctx context.Context, now time.Time) error {
	l := s.cfg.FairnessDayLength
	today := fairness.DayStartMs(now.UnixMilli(), l)
	var errs []error
	for _, app := range s.cfg.FairnessAppCodes {
		for _, day := range []int64{today, today + l.Milliseconds()} {
			errs = append(errs, s.makeDay(ctx, app, day, now.UnixMilli()))
		}
		var n int
		err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM lucky_fairness_days WHERE app_code = ? AND day_start_ms = ?
		AND (mode <> 'commit_reveal' OR commitment <> '')`, app, today+l.Milliseconds()).Scan(&n)
		s.fair.nextDay.WithLabelValues(app).Set(float64(n))
		errs = append(errs, err)
	}
	errs = append(errs, s.revealDue(ctx, now.UnixMilli()))
	return errors.Join(errs...)
}

// makeDay stores app's day starting at day unless it exists: its mode
// (the schedule's, else lucky.randomness) and in commit-reveal mode a new
// sealed seed, its commitment and LuckyFairnessCommitted. The schedule is
// read with a shared lock, so a `fairness schedule` for this day either
// commits first or finds the day made.
func (s *Service) makeDay(ctx context.Context, app string, day, nowMs int64) error {
	l := s.cfg.FairnessDayLength
	label := fairness.DayLabel(day, l)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var stored string
	err = tx.QueryRowContext(ctx, `SELECT mode FROM lucky_fairness_days WHERE app_code = ? AND day_start_ms = ?`, app, day).Scan(&stored)
	if err == nil {
		s.warnContradiction(app, label, stored)
		return nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	mode := s.cfg.Randomness
	err = tx.QueryRowContext(ctx, `SELECT mode FROM lucky_fairness_schedule WHERE app_code = ? AND from_day_ms <= ?
	ORDER BY from_day_ms DESC LIMIT 1 LOCK IN SHARE MODE`, app, day).Scan(&mode)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	var sealed []byte
	var commitment string
	if mode == fairness.ModeCommitReveal {
		if s.cfg.FairnessKeys == nil {
			return fmt.Errorf("luckydraw: day %s of %s is scheduled commit_reveal but lucky.fairness.key is not set", label, app)
		}
		seed, err := fairness.NewSeed()
		if err != nil {
			return err
		}
		commitment = fairness.Commitment(seed)
		if sealed, err = s.cfg.FairnessKeys.Seal(seed, fairness.AAD(app, day)); err != nil {
			return err
		}
		clear(seed)
	}
	res, err := tx.ExecContext(ctx, `INSERT IGNORE INTO lucky_fairness_days (app_code, day_start_ms, day_end_ms, day_label, mode,
	seed_sealed, commitment, committed_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, app, day, day+l.Milliseconds(), label, mode, sealed, commitment, nowMs)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 { // another replica won
		return err
	}
	if mode == fairness.ModeCommitReveal {
		id := "LuckyFairnessCommitted:" + app + ":" + label
		if err := insertFairnessEvent(ctx, tx, app, label, id, nowMs, &activityv1.LuckyFairnessCommitted{EventId: id, AppCode: app,
			Day: label, DayStartMs: day, DayEndMs: day + l.Milliseconds(), Commitment: commitment, CommittedAtMs: nowMs}); err != nil {
			return err
		}
	}
	s.warnContradiction(app, label, mode)
	if err := tx.Commit(); err != nil {
		return err
	}
	s.fair.forget(app) // this replica's draws see the day now, the others within unstoredTTL
	s.log.Info("fairness day stored", "app_code", app, "day", label, "mode", mode, "commitment", commitment)
	return nil
}

// warnContradiction logs once per day a stored mode lucky.randomness
// contradicts: the stored one draws.
func (s *Service) warnContradiction(app, label, mode string) {
	if mode == s.cfg.Randomness {
		return
	}
	s.fair.mu.Lock()
	seen := s.fair.warned[app+"\x00"+label]
	s.fair.warned[app+"\x00"+label] = true
	s.fair.mu.Unlock()
	if !seen {
		s.log.Warn("lucky.randomness contradicts the scheduled mode of a day: the scheduled mode draws", "key", "lucky.randomness",
			"configured", s.cfg.Randomness, "app_code", app, "day", label, "scheduled", mode)
	}
}

// revealDue reveals every commit-reveal day that ended at least
// reveal_grace before nowMs, of any app: lucky.fairness.app_codes decides
// which apps get new days, and a day committed before its app left every
// list must still be revealed. Each: the seed in clear, checked against
// its commitment, and LuckyFairnessRevealed, in one transaction.
func (s *Service) revealDue(ctx context.Context, nowMs int64) error {
	rows, err := s.db.QueryContext(ctx, `SELECT app_code, day_start_ms, day_end_ms, day_label, seed_sealed, commitment FROM lucky_fairness_days
	WHERE mode = 'commit_reveal' AND revealed_seed IS NULL AND day_end_ms <= ? ORDER BY day_start_ms`, nowMs-s.cfg.FairnessRevealGrace.Milliseconds())
	if err != nil {
		return err
	}
	type due struct {
		app, label, commitment string
		start, end             int64
		sealed                 []byte
	}
	var ds []due
	err = eachRow(rows, func(rs *sql.Rows) error {
		var d due
		err := rs.Scan(&d.app, &d.start, &d.end, &d.label, &d.sealed, &d.commitment)
		ds = append(ds, d)
		return err
	})
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range ds {
		errs = append(errs, s.reveal(ctx, d.app, d.label, d.commitment, d.start, d.end, d.sealed, nowMs))
	}
	return errors.Join(errs...)
}

func (s *Service) reveal(ctx context.Context, app, label, commitment string, start, end int64, sealed []byte, nowMs int64) error {
	if s.cfg.FairnessKeys == nil {
		return fmt.Errorf("luckydraw: the seed of day %s of %s is due for reveal but lucky.fairness.key is not set", label, app)
	}
	seed, err := s.cfg.FairnessKeys.Open(sealed, fairness.AAD(app, start))
	if err != nil {
		return fmt.Errorf("luckydraw: reveal day %s of %s: %w", label, app, err)
	}
	if fairness.Commitment(seed) != commitment {
		return fmt.Errorf("luckydraw: reveal day %s of %s: the decrypted seed does not match its commitment", label, app)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	h := hex.EncodeToString(seed)
	res, err := tx.ExecContext(ctx, `UPDATE lucky_fairness_days SET revealed_seed = ?, revealed_at_ms = ? WHERE app_code = ? AND day_start_ms = ?
	AND revealed_seed IS NULL`, h, nowMs, app, start)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 { // another replica revealed it
		return err
	}
	id := "LuckyFairnessRevealed:" + app + ":" + label
	if err := insertFairnessEvent(ctx, tx, app, label, id, nowMs, &activityv1.LuckyFairnessRevealed{EventId: id, AppCode: app, Day: label,
		DayStartMs: start, DayEndMs: end, Commitment: commitment, Seed: h, RevealedAtMs: nowMs}); err != nil {
		return err
	}
	s.log.Info("fairness seed revealed", "app_code", app, "day", label, "commitment", commitment)
	return tx.Commit()
}

// insertFairnessEvent writes a fairness event's lucky_outbox row: key
// app_code, aggregate "{app_code}:{day}".
func insertFairnessEvent(ctx context.Context, tx *sql.Tx, app, label, id string, nowMs int64, m proto.Message) error {
	payload, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO lucky_outbox (event_id, app_code, event_type, message_type, aggregate_id, kafka_key, payload,
	status, next_retry_at_ms, created_at_ms, updated_at_ms) VALUES (?, ?, 'activity_event', ?, ?, ?, ?, 'pending', ?, ?, ?)`,
		id, app, string(m.ProtoReflect().Descriptor().Name()), app+":"+label, app, payload, nowMs, nowMs, nowMs)
	return err
}
