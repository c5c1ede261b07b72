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
		Long: `sink consumes kafka.topics.mic_ledger, kafka.topics.lucky_pool_inflow and
kafka.topics.lucky_events in consumer group sink.group and applies them to
MySQL exactly once: each batch (up to sink.batch_size records or
sink.flush_interval) is one transaction that records every new event_id in
user_mic_event_consumption, lucky_pool_inflow_consumption or
lucky_event_consumption (repeats change nothing), applies the
pre-aggregated facts (user_mic_sessions never regressing, daily and
lifetime deltas; lucky_pool_inflow_daily, and lucky_pools for the gifts
no draw of 'roomflow lucky' claimed first (lucky_pool_inflow_claims; once
'roomflow lucky' owns the pools, gifts without a draw_id add nothing);
lucky_payout_stats_hourly from LuckyGiftDrawn, lucky_room_stats_hourly
from LuckyGiftDrawn and LuckyDrawRejected), and stores the consumed
offsets in roomflow_sink_offsets. On assignment each partition is claimed in MySQL
(owner and generation) and consumption starts at the offset stored there;
an instance whose partitions were claimed by another cannot commit.
Deadlocks, lock wait timeouts and lost connections retry the whole batch
(sink.max_retries). Kafka offset commits are informational only.

With --instance-id (the pod name) the sink is a static group member
("<instance id>-sink"): restarted after a crash it takes its partitions
straight back instead of after kafka.session_timeout; stopped by SIGTERM
it leaves the group. The owner id then defaults to the instance id.

The stats query API is served as well on whichever of api.addr,
api.app_addr and api.grpc_addr are set (see 'roomflow api').`,
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
			storeCfg, err := sinkStoreConfig(d)
			if err != nil {
				return nil, err
			}
			apiCfg, err := statsAPIConfig(d)
			if err != nil {
				return nil, err
			}
			if apiListeners(d) != (statsapi.Listeners{}) {
				if apiCfg.TLS, err = apiTLS(d); err != nil {
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
			sink := leavingOnStop(d, "sink", s, staticMember{group: sinkCfg.Group, id: sinkCfg.InstanceID})
			if apiListeners(d) == (statsapi.Listeners{}) {
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
		return api.Serve(ctx, apiListeners(d), d.Config.Shutdown.Timeout.D())
	})
}

// apiCmd is `roomflow api`: the stats API alone. It is not a registered
// component, so `roomflow run` serves the API only through the sink.
func apiCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "api",
		Short: "Serve the mic stats query API: internal HTTP, app HTTP and gRPC (read-only MySQL)",
		Long: `api serves the read-only stats API over the sink's tables on three
listeners; each is off when its address is empty.

api.addr (internal: back office, tasks; never expose it to the gateway's
clients):
  GET /api/v1/users/{user_id}/mic-stats?range=lifetime
  GET /api/v1/users/{user_id}/mic-stats?from_ms=...&to_ms=...
  GET /api/v1/users/{user_id}/mic-sessions?limit=N   (default 20, at most 100)
  each with an optional app_code (default: the configured app_code)

api.app_addr (the one the gateway reaches):
  GET /api/v1/users/me/mic-stats?range=lifetime
  GET /api/v1/users/me/mic-stats?from_ms=...&to_ms=...
  the user is the api.user_header header (default X-User-Id) and the app
  the api.app_code_header header (default X-App-Code, absent: the
  configured app_code); missing or malformed: 401 with a JSON error. The
  internal routes are not served here, the /me routes not on api.addr.

api.grpc_addr: hyapp.user.v1.UserService/GetUserMicLifetimeStats (seed
001); unknown users get zeros, bad input INVALID_ARGUMENT.

mic-stats answers seat_occupied_ms, mic_online_ms, session_count,
first_mic_at_ms and last_mic_at_ms. A from_ms/to_ms range is exact over
closed sessions: the milliseconds inside [from_ms, to_ms), the distinct
sessions overlapping it, first/last mic time clamped into it; to_ms >
from_ms, at most 366 days; bad ranges get 400 with a JSON error. Users
without rows get zeros, never 404. 'roomflow sink' serves the same API.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := g.deps()
			if err != nil {
				return err
			}
			if apiListeners(d) == (statsapi.Listeners{}) {
				return fmt.Errorf("api.addr, api.app_addr and api.grpc_addr are all empty: nothing to serve")
			}
			apiCfg, err := statsAPIConfig(d)
			if err != nil {
				return err
			}
			if apiCfg.TLS, err = apiTLS(d); err != nil {
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
