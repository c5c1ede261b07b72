package command

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/hyapp/roomflow/domain/lucky/rulestore"
	"github.com/hyapp/roomflow/internal/app"
	"github.com/hyapp/roomflow/processors/mic/micproc"
	"github.com/hyapp/roomflow/processors/room"
)

func processSpec() app.Spec {
	return componentSpec("process", "Run the exactly-once stream processors (room processor, mic processor)",
		func(fs *pflag.FlagSet) {
			fs.String("only", "", "run only this processor: room or mic (overrides process.only)")
			instanceIDFlag(fs)
		},
		func(ctx context.Context, d *app.Deps) (app.Component, error) {
			sel, err := processSelection(d)
			if err != nil {
				return nil, err
			}
			runRoom, runMic := sel == "" || sel == "room", sel == "" || sel == "mic"
			// Every selected processor's config is checked before
			// anything connects.
			var (
				roomCfg  room.Config
				rulesCfg rulestore.Config
				micCfg   micproc.Config
				errs     [3]error
			)
			if runRoom {
				roomCfg, errs[0] = roomConfig(d)
				rulesCfg, errs[1] = rulestore.ConfigFrom(d.Config)
			}
			if runMic {
				micCfg, errs[2] = micConfig(d)
			}
			if err := errors.Join(append(errs[:], checkWireFormat(d))...); err != nil {
				return nil, err
			}
			var rts []app.Component // each commits or aborts its own open transaction on the way out
			var members []app.StaticMember
			if runRoom {
				db, err := d.DB(ctx)
				if err != nil {
					return nil, err
				}
				rules, err := rulestore.New(rulesCfg, db)
				if err != nil {
					return nil, fmt.Errorf("room processor: %w", err)
				}
				if roomCfg.Frames, err = publicFrames(ctx, d, "room-processor", "lucky_pool_inflow"); err != nil {
					return nil, fmt.Errorf("room processor: %w", err)
				}
				rt, err := room.New(roomCfg, rules)
				if err != nil {
					return nil, fmt.Errorf("room processor: %w", err)
				}
				d.Health.AddReadiness("room-processor", rt.Ready)
				rts = append(rts, rt)
				members = append(members, app.StaticMember{Group: roomCfg.Runtime.Group, ID: roomCfg.Runtime.InstanceID})
			}
			if runMic {
				public := []string{"mic_session_closed", "mic_daily_stats", "mic_lifetime_stats"}
				if !micCfg.Settings.DisableTotals {
					public = append(public, "mic_daily_totals", "mic_lifetime_totals")
				}
				var err error
				if micCfg.Topics.Frames, err = publicFrames(ctx, d, "mic-processor", public...); err != nil {
					return nil, fmt.Errorf("mic processor: %w", err)
				}
				rt, _, err := micproc.NewRuntime(micCfg)
				if err != nil {
					return nil, fmt.Errorf("mic processor: %w", err)
				}
				d.Health.AddReadiness("mic-processor", rt.Ready)
				rts = append(rts, rt)
				members = append(members, app.StaticMember{Group: micCfg.Runtime.Group, ID: micCfg.Runtime.InstanceID})
			}
			return app.LeavingOnStop(d, "process", app.Together(rts...), members...), nil
		})
}
