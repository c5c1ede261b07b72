package command

import (
	"context"
	"errors"

	"github.com/spf13/pflag"

	"github.com/hyapp/roomflow/internal/app"
	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/producers/relay"
)

func relaySpec() app.Spec {
	return componentSpec("relay", "Relay MySQL room_outbox into Kafka, gap-safe and exactly once",
		func(fs *pflag.FlagSet) {
			instanceIDFlag(fs)
			fs.Bool("resnapshot", false, "relay.mode binlog: snapshot the rows the stored position has not relayed instead of "+
				"streaming from its binlog position (the recovery when the binlog there was purged); nothing is relayed twice")
		},
		checked(relayStartConfig),
		func(ctx context.Context, d *app.Deps) (app.Component, error) {
			cfg, err := relayStartConfig(d)
			if err != nil {
				return nil, err
			}
			db, err := d.DB(ctx)
			if err != nil {
				return nil, err
			}
			member := app.StaticMember{Group: relay.LeaderGroup(cfg.TransactionalID), ID: cfg.InstanceID}
			r, err := relay.New(cfg, db)
			if err != nil {
				return nil, err
			}
			d.Health.AddReadiness("relay", r.Ready)
			return app.LeavingOnStop(d, "relay", r, member), nil
		})
}

// relayStartConfig is the relay's Config with its flags applied.
func relayStartConfig(d *app.Deps) (relay.Config, error) {
	cfg, err := relayConfig(d, memberID(d, "relay"))
	if err != nil {
		return cfg, err
	}
	if re, _ := d.Flags.GetBool("resnapshot"); re {
		if cfg.Mode != relay.ModeBinlog {
			return cfg, cfgerr.Usage(errors.New("--resnapshot: only with relay.mode binlog"))
		}
		cfg.Binlog.Resnapshot = true
	}
	return cfg, nil
}
