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
		checked(processStartConfig),
		func(ctx context.Context, d *app.Deps) (app.Component, error) {
			c, err := processStartConfig(d)
			if err != nil {
				return nil, err
			}
			runRoom, runMic, roomCfg, rulesCfg, micCfg := c.runRoom, c.runMic, c.room, c.rules, c.mic
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

// processConfigs are the Configs of the processors `roomflow process` runs.
type processConfigs struct {
	runRoom, runMic bool
	room            room.Config
	rules           rulestore.Config
	mic             micproc.Config
}

// processStartConfig checks every selected processor's config, all
// errors joined, before anything connects.
func processStartConfig(d *app.Deps) (processConfigs, error) {
	sel, err := processSelection(d)
	if err != nil {
		return processConfigs{}, err
	}
	c := processConfigs{runRoom: sel == "" || sel == "room", runMic: sel == "" || sel == "mic"}
	var errs [3]error
	if c.runRoom {
		c.room, errs[0] = roomConfig(d)
		c.rules, errs[1] = rulestore.ConfigFrom(d.Config)
	}
	if c.runMic {
		c.mic, errs[2] = micConfig(d)
	}
	return c, errors.Join(append(errs[:], checkWireFormat(d))...)
}
