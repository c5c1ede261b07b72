package luckyctl

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"

	"github.com/hyapp/roomflow/domain/fairness"
	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/services/luckydraw"
)

// FairnessOptions are the flags of `lucky fairness schedule|verify`.
type FairnessOptions struct {
	AppCode string // default: the configured app_code
	Mode    string // schedule
	Day     string // schedule --from, verify --day
}

// fairnessDay checks o against cfg (a usage error naming the flag) and
// returns the app and the day's start.
func fairnessDay(cfg *config.Config, o FairnessOptions, flag string) (string, int64, error) {
	app := o.AppCode
	if app == "" {
		app = cfg.AppCode
	}
	if o.Day == "" {
		return "", 0, cfgerr.Usage(fmt.Errorf("%s is required", flag))
	}
	day, err := fairness.ParseDay(o.Day, cfg.Lucky.Fairness.DayLength.D())
	if err != nil {
		return "", 0, cfgerr.Usage(fmt.Errorf("%s: %w", flag, err))
	}
	return app, day, nil
}

// CheckFairnessMode refuses a --mode that is not a mode.
func CheckFairnessMode(mode string) error {
	if !fairness.ValidMode(mode) {
		return cfgerr.Usage(fmt.Errorf("--mode must be %s or %s (got %q)", fairness.ModeCrypto, fairness.ModeCommitReveal, mode))
	}
	return nil
}

// ScheduleFairness stores o.Mode for the app's days from o.Day on through
// a (its operator, lucky_admin_log) and prints the change; today, a past
// day, a committed day or a bad --from is a usage error (exit 2).
func ScheduleFairness(ctx context.Context, a *luckydraw.Admin, cfg *config.Config, o FairnessOptions, w io.Writer) error {
	if err := CheckFairnessMode(o.Mode); err != nil {
		return err
	}
	app, day, err := fairnessDay(cfg, o, "--from")
	if err != nil {
		return err
	}
	c, err := a.ScheduleFairness(ctx, app, o.Mode, day, cfg.Lucky.Fairness.DayLength.D())
	if errors.Is(err, luckydraw.ErrSchedule) {
		return cfgerr.Usage(err)
	}
	if err == nil {
		PrintChanges(w, c)
	}
	return err
}

// VerifyFairness recomputes every draw of the app's day o.Day from MySQL
// and the revealed seed, prints each difference and a summary, and fails
// (exit 1) on any difference or when the day cannot be verified.
func VerifyFairness(ctx context.Context, db *sql.DB, cfg *config.Config, o FairnessOptions, w io.Writer) error {
	app, day, err := fairnessDay(cfg, o, "--day")
	if err != nil {
		return err
	}
	v, err := luckydraw.VerifyFairnessDay(ctx, db, app, day)
	if err != nil {
		return err
	}
	for _, d := range v.Differences {
		fmt.Fprintf(w, "DIFFERENCE %s\n", d)
	}
	fmt.Fprintf(w, "verified %s day %s (commitment %s): %d draws, %d differences\n", app, v.Day, v.Commitment, v.Draws, len(v.Differences))
	if len(v.Differences) > 0 {
		return fmt.Errorf("day %s of %s: %d differences", v.Day, app, len(v.Differences))
	}
	return nil
}
