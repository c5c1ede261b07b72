package demo

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/hyapp/roomflow/producers/loadgen"
	"github.com/hyapp/roomflow/services/luckydraw"
)

// verifyFairness waits until every commit-reveal day the draws fell in is
// revealed (its end plus demoRevealGrace, and the writer's next tick), then
// recomputes each day's draws as `roomflow lucky fairness verify` does;
// any difference fails the demo.
func (d *demo) verifyFairness(ctx context.Context) error {
	t0 := time.Now()
	var days []int64
	err := loadgen.ScanRows(ctx, d.db, `SELECT f.day_start_ms FROM lucky_fairness_days f WHERE f.app_code = ? AND f.mode = 'commit_reveal'
	AND EXISTS (SELECT 1 FROM lucky_draw_records r WHERE r.app_code = f.app_code AND r.created_at_ms >= f.day_start_ms
	AND r.created_at_ms < f.day_end_ms) ORDER BY f.day_start_ms`, d.cfg.AppCode, func(rows *sql.Rows) error {
		var day int64
		err := rows.Scan(&day)
		days = append(days, day)
		return err
	})
	if err != nil {
		return err
	}
	if len(days) == 0 {
		return fmt.Errorf("no draw fell in a commit-reveal day")
	}
	for _, day := range days {
		for {
			var n int
			if err := d.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM lucky_fairness_days WHERE app_code = ? AND day_start_ms = ?
			AND revealed_seed IS NOT NULL`, d.cfg.AppCode, day).Scan(&n); err != nil {
				return err
			}
			if n == 1 {
				break
			}
			select {
			case err := <-d.runErr:
				return fmt.Errorf("pipeline stopped: %w", err)
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
		v, err := luckydraw.VerifyFairnessDay(ctx, d.db, d.cfg.AppCode, day)
		if err != nil {
			return err
		}
		d.res.Fairness = append(d.res.Fairness, v)
		d.step("fairness day %s: commitment %s, %d draws recomputed from the revealed seed, %d differences",
			v.Day, v.Commitment, v.Draws, len(v.Differences))
		if len(v.Differences) > 0 {
			return fmt.Errorf("fairness day %s: %d differences (first: %s)", v.Day, len(v.Differences), v.Differences[0])
		}
	}
	d.res.FairnessWait = time.Since(t0)
	return nil
}
