package command

import (
	"context"
	"errors"

	"github.com/spf13/pflag"

	"github.com/hyapp/roomflow/internal/app"
	"github.com/hyapp/roomflow/producers/relay"
)

func relaySpec() app.Spec {
	return app.Spec{
		Name:  "relay",
		Short: "Relay MySQL room_outbox into Kafka, gap-safe and exactly once",
		Long: `relay tails MySQL room_outbox by id into kafka.topics.room_events (routes by
event_type through relay.routes), exactly once: each batch and the relay's
position (high id plus open gaps) are committed in one Kafka transaction,
the position living in kafka.topics.relay_offsets. Rows that commit late
(an id visible after higher ones) are relayed when they appear; gaps are
given up after relay.gap_max_age. Empty or oversized payloads go to
kafka.topics.dlq with "error" and "error_reason" headers.

Run several replicas with the same relay.transactional_id for high
availability: one leads, the others stand by and take over within
relay.failover_timeout; a former leader is fenced by the transactional id.
With --instance-id (the pod name) a replica is a static member of the
leader group: restarted after a crash it leads again at once instead of
after relay.failover_timeout; stopped by SIGTERM it leaves, so a standby
takes over at once. The relay never locks or writes room_outbox.

With relay.mode binlog the leader reads the row binlog of mysql.dsn's
server as a replica (relay.binlog.server_id) instead of polling: the first
start snapshots the table, then streams; the position in
kafka.topics.relay_offsets is then a GTID set. If the server purged the
binlog past it, the relay stops with an error and
roomflow_relay_binlog_purged = 1: run once with --resnapshot.`,
		Flags: func(fs *pflag.FlagSet) {
			instanceIDFlag(fs)
			fs.Bool("resnapshot", false, "relay.mode binlog: snapshot the rows the stored position has not relayed instead of "+
				"streaming from its binlog position (the recovery when the binlog there was purged); nothing is relayed twice")
		},
		New: func(ctx context.Context, d *app.Deps) (app.Component, error) {
			cfg, err := relayConfig(d, memberID(d, "relay"))
			if err != nil {
				return nil, err
			}
			if re, _ := d.Flags.GetBool("resnapshot"); re {
				if cfg.Mode != relay.ModeBinlog {
					return nil, errors.New("--resnapshot: only with relay.mode binlog")
				}
				cfg.Binlog.Resnapshot = true
			}
			db, err := d.DB(ctx)
			if err != nil {
				return nil, err
			}
			member := staticMember{group: relay.LeaderGroup(cfg.TransactionalID), id: cfg.InstanceID}
			r, err := relay.New(cfg, db)
			if err != nil {
				return nil, err
			}
			d.Health.AddReadiness("relay", r.Ready)
			return leavingOnStop(d, "relay", r, member), nil
		},
	}
}
