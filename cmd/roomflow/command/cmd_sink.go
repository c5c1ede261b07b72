package command

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/hyapp/roomflow/internal/app"
	"github.com/hyapp/roomflow/services/statsapi"
	mysqlsink "github.com/hyapp/roomflow/sinks/mysql"
)

func sinkSpec() app.Spec {
	return app.Spec{
		Name:  "sink",
		Short: "Apply the mic ledger, lucky pool inflow and lucky events to MySQL exactly once; serve the stats API",
		Long:  help("sink"),
		Flags: func(fs *pflag.FlagSet) {
			fs.String("owner-id", "", "instance id written to roomflow_sink_offsets (default: --instance-id, else hostname-pid-random; must be unique per replica)")
			fs.Int("parallelism", 2, "concurrent transactions per batch, split by partition (1: one transaction per batch)")
			instanceIDFlag(fs)
		},
		New: func(ctx context.Context, d *app.Deps) (app.Component, error) {
			// Every config first, before MySQL is even opened.
			sinkCfg, err := sinkConfig(d)
			if err != nil {
				return nil, err
			}
			storeCfg, err := sinkStoreConfig(d.Config)
			if err != nil {
				return nil, err
			}
			apiCfg, err := statsAPIConfig(d)
			if err != nil {
				return nil, err
			}
			if statsapi.ListenersFrom(d.Config) != (statsapi.Listeners{}) {
				if apiCfg.TLS, err = statsapi.TLSFrom(d.Config, d.Log); err != nil {
					return nil, err
				}
			}
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
			api, err := statsapi.New(apiCfg, db)
			if err != nil {
				return nil, err
			}
			return app.Together(sink, apiComponent(api, d)), nil
		},
	}
}

// apiComponent serves api on the configured listeners until ctx ends, then
// shuts them down within shutdown.timeout.
func apiComponent(api *statsapi.API, d *app.Deps) app.Component {
	return app.ComponentFunc(func(ctx context.Context) error {
		return api.Serve(ctx, statsapi.ListenersFrom(d.Config), d.Config.Shutdown.Timeout.D())
	})
}

// apiCmd is `roomflow api`: the stats API alone. It is not a registered
// component, so `roomflow run` serves the API only through the sink.
func apiCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "api",
		Short: "Serve the mic stats query API: internal HTTP, app HTTP and gRPC (read-only MySQL)",
		Long:  help("api"),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := g.deps()
			if err != nil {
				return err
			}
			if statsapi.ListenersFrom(d.Config) == (statsapi.Listeners{}) {
				return fmt.Errorf("api.addr, api.app_addr and api.grpc_addr are all empty: nothing to serve")
			}
			apiCfg, err := statsAPIConfig(d)
			if err != nil {
				return err
			}
			if apiCfg.TLS, err = statsapi.TLSFrom(d.Config, d.Log); err != nil {
				return err
			}
			spec := app.Spec{Name: "api", New: func(ctx context.Context, d *app.Deps) (app.Component, error) {
				db, err := d.DB(ctx)
				if err != nil {
					return nil, err
				}
				api, err := statsapi.New(apiCfg, db)
				if err != nil {
					return nil, err
				}
				return apiComponent(api, d), nil
			}}
			return app.Run(cmd.Context(), d, []app.Spec{spec})
		},
	}
}
