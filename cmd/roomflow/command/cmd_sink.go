package command

import (
	"context"
	"database/sql"
	"errors"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/hyapp/roomflow/internal/app"
	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/services/statsapi"
	mysqlsink "github.com/hyapp/roomflow/sinks/mysql"
	"github.com/hyapp/roomflow/sinks/mysql/appliers"
)

func sinkSpec() app.Spec {
	return componentSpec("sink", "Apply the mic ledger, lucky pool inflow and lucky events to MySQL exactly once; serve the stats API",
		func(fs *pflag.FlagSet) {
			fs.String("owner-id", "", "instance id written to roomflow_sink_offsets (default: --instance-id, else hostname-pid-random; must be unique per replica)")
			fs.Int("parallelism", 2, "concurrent transactions per batch, split by partition (1: one transaction per batch)")
			instanceIDFlag(fs)
		},
		checked(sinkStartConfig),
		func(ctx context.Context, d *app.Deps) (app.Component, error) {
			c, err := sinkStartConfig(d)
			if err != nil {
				return nil, err
			}
			sinkCfg, storeCfg, apiCfg := c.sink, c.store, c.api
			db, err := d.DB(ctx)
			if err != nil {
				return nil, err
			}
			store, err := mysqlsink.NewStore(storeCfg, db)
			if err != nil {
				return nil, err
			}
			s, err := mysqlsink.New(sinkCfg, store)
			if err != nil {
				return nil, err
			}
			sink := app.LeavingOnStop(d, "sink", s, app.StaticMember{Group: sinkCfg.Group, ID: sinkCfg.InstanceID})
			if statsapi.ListenersFrom(d.Config) == (statsapi.Listeners{}) {
				return sink, nil
			}
			api, err := apiComponent(d, apiCfg, db)
			if err != nil {
				return nil, err
			}
			return app.Together(sink, api), nil
		})
}

// sinkConfigs are the Configs of `roomflow sink`: the sink, its store and
// the stats API it serves.
type sinkConfigs struct {
	sink  mysqlsink.Config
	store mysqlsink.StoreConfig
	api   statsapi.Config
}

// sinkStartConfig checks every config of the sink, before MySQL is even
// opened.
func sinkStartConfig(d *app.Deps) (sinkConfigs, error) {
	var c sinkConfigs
	var err error
	if c.sink, err = sinkConfig(d); err != nil {
		return c, err
	}
	if c.store, err = appliers.StoreConfigFrom(d.Config); err != nil {
		return c, err
	}
	c.api, err = statsAPIServing(d)
	return c, err
}

// statsAPIServing is the stats API's Config with api.tls read when any
// api.* listener is set (a command starts serving it).
func statsAPIServing(d *app.Deps) (statsapi.Config, error) {
	c, err := statsAPIConfig(d)
	if err == nil && statsapi.ListenersFrom(d.Config) != (statsapi.Listeners{}) {
		c.TLS, err = statsapi.TLSFrom(d.Config, d.Log)
	}
	return c, err
}

// apiComponent serves the stats API on the configured listeners until
// shutdown.drain_delay after ctx ends, then shuts them down within
// shutdown.timeout; the sink beside it stops at once.
func apiComponent(d *app.Deps, c statsapi.Config, db *sql.DB) (app.Component, error) {
	api, err := statsapi.New(c, db)
	if err != nil {
		return nil, err
	}
	return d.Serving(app.ComponentFunc(func(ctx context.Context) error {
		return api.Serve(ctx, statsapi.ListenersFrom(d.Config), d.Config.Shutdown.Timeout.D())
	})), nil
}

// apiCmd is `roomflow api`: the stats API alone. It is not a registered
// component, so `roomflow run` serves the API only through the sink.
func apiCmd(g *globals) *cobra.Command {
	return newCmd("api", "Serve the mic stats query API: internal HTTP, app HTTP and gRPC (read-only MySQL)", help("api"), cobra.NoArgs,
		g.withDeps(func(cmd *cobra.Command, args []string, d *app.Deps) error {
			if statsapi.ListenersFrom(d.Config) == (statsapi.Listeners{}) {
				return cfgerr.Usage(errors.New("api.addr, api.app_addr and api.grpc_addr are all empty: nothing to serve"))
			}
			apiCfg, err := statsAPIServing(d)
			if err != nil {
				return err
			}
			spec := app.Spec{Name: "api", New: func(ctx context.Context, d *app.Deps) (app.Component, error) {
				db, err := d.DB(ctx)
				if err != nil {
					return nil, err
				}
				return apiComponent(d, apiCfg, db)
			}}
			return app.Run(cmd.Context(), d, []app.Spec{spec})
		}))
}
