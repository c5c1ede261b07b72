package loadrun

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/producers/loadgen"
)

// Run is `roomflow loadgen` once its flags are parsed: a load test when
// ld.Duration > 0 (Load, with a load test's own defaults for the flags not
// given: changed says which were), else the fixed scenario or, with
// o.Live, its wall-clock version (Scenario, over 10 minutes unless --span
// was given). The app_code is cfg's. Flag mistakes are refused before
// anything connects, naming the flag.
func Run(ctx context.Context, cfg *config.Config, sc loadgen.Scenario, ld loadgen.Load, o Options, changed func(flag string) bool) error {
	sc.AppCode = cfg.AppCode
	if ld.Duration > 0 {
		if o.Live {
			return cfgerr.Usage(fmt.Errorf("--live and --duration exclude each other"))
		}
		if err := loadTestDefaults(cfg, &sc, &ld, &o, changed); err != nil {
			return err
		}
		return Load(ctx, cfg, sc, ld, o)
	}
	if o.Live {
		if o.To != "mysql" {
			return fmt.Errorf("--live writes to mysql only")
		}
		if !changed("span") {
			sc.Span = 10 * time.Minute
		}
	}
	return Scenario(ctx, cfg, sc, o)
}

// loadKeys re-keys loadgen.Load's Validate errors to the flags.
var loadKeys = map[string]string{
	"to": "--to", "duration": "--duration", "rate": "--rate", "ramp": "--ramp", "writers": "--writers", "batch": "--batch",
	"hot_room_skew": "--hot-room-skew", "session_median": "--session-median", "session_p99": "--session-p99",
	"publish_failure_share": "--publish-failure-share", "redelivery_share": "--redelivery-share",
	"malformed_share": "--malformed-share", "late_commit_share": "--late-commit-share", "late_commit_hold": "--late-commit-hold",
}

// loadTestDefaults applies a load test's own defaults where their flags
// were not given (an evening's users and rooms: the scenario's 300 users
// would all sit on a mic within seconds; loadgen.DefaultLoad's rate),
// copies the flags the scenario mode shares (--to, --rate, --batch) into
// ld, and checks ld, naming the flags in its errors.
func loadTestDefaults(cfg *config.Config, sc *loadgen.Scenario, ld *loadgen.Load, o *Options, changed func(string) bool) error {
	if !changed("users") {
		sc.Users = 100_000
	}
	if !changed("rooms") {
		sc.Rooms = 2_000
	}
	if !changed("rate") {
		o.Rate = loadgen.DefaultLoad().Rate
	}
	ld.To, ld.Batch, ld.Rate = o.To, o.Batch, o.Rate
	err := cfgerr.Under("loadgen", loadKeys, ld.Validate())
	if ld.LateCommitShare > 0 && ld.LateCommitHold >= cfg.Relay.GapMaxAge.D() {
		err = errors.Join(err, &cfgerr.FieldError{Key: "--late-commit-hold", Msg: fmt.Sprintf("must be below relay.gap_max_age (%s), or the relay gives the held ids up", cfg.Relay.GapMaxAge.D())})
	}
	return err
}
