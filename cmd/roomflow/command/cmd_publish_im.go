package command

import (
	"context"

	"github.com/hyapp/roomflow/internal/app"
	"github.com/hyapp/roomflow/sinks/imoutbox"
)

func publishIMSpec() app.Spec {
	return app.Spec{
		Name:  "publish-im",
		Short: "Publish room events to Tencent IM (Kafka fast path + room_outbox compensation worker)",
		Long: `publish-im delivers room system messages to Tencent Cloud IM with seed 000's
room_outbox semantics. The fast path consumes kafka.topics.room_events in
the consumer group outbox_worker.group, holds each event for
im.fast_path_delay (default 3s, counted from when it was consumed, so
room-service's own synchronous publish comes first), then claims its
room_outbox row (pending/retryable, or delivering with an expired lock),
sends it with send_group_msg to group {im.group_id_prefix}{room_id}, and
marks it delivered, or retryable with retry_count+1 and a short last_error.
Rows room-service marked delivered meanwhile are not sent again;
RoomCreated, RoomHeatChanged and RoomRankChanged are marked delivered
without a call. Set im.fast_path_delay to 0 where room-service no longer
publishes itself.

The compensation worker claims pending rows older than
outbox_worker.claim_grace (at least im.fast_path_delay), retryable rows, and
expired claims every outbox_worker.poll_interval, outbox_worker.batch_size
at a time, with FOR UPDATE SKIP LOCKED, each send bounded by
outbox_worker.publish_timeout.

outbox_worker.enabled=false switches delivery off as a whole: neither the
fast path nor the compensation worker runs (a WARN at start and
roomflow_im_delivery_enabled 0 say so); rows wait in room_outbox.

On SIGTERM /readyz answers 503 at once, claiming stops, sends in flight
finish within publish_timeout (those still running near shutdown.timeout
are cancelled and their rows left delivering until lock_until_ms), results
are recorded, and MySQL is closed last.

im.max_calls_per_second is roomflow's share of Tencent's per-app limit
(room-service's own sends use the rest), for all replicas together: each
replica paces at the share times the fraction of the room events partitions
its fast path owns, and sends nothing while it owns none. Without Kafka
(a fast path out of its consumer group for im.scan_fallback_after, default
1m), the replicas compete for a MySQL named lock and the holder's
compensation scan claims every room at the full share
(roomflow_im_scan_fallback 1), until its fast path is back in its group;
0 switches that off. A room is sent by
one replica only (the compensation scan takes the rooms of its replica's
partitions), paced under im.max_messages_per_group_per_second. Requires
im.sdk_app_id and im.secret_key unless outbox_worker.enabled is false.

With --instance-id (the pod name) the fast path is a static group member
("<instance id>-publish-im"): restarted after a crash it takes its
partitions straight back instead of after kafka.session_timeout; stopped
by SIGTERM it leaves the group.`,
		Flags: instanceIDFlag,
		New: func(ctx context.Context, d *app.Deps) (app.Component, error) {
			member := staticMember{group: d.Config.OutboxWorker.Group, id: memberID(d, "publish-im")}
			cfg, err := imPublisherConfig(d, member.id) // bad keys, missing credentials: before dialling MySQL
			if err != nil {
				return nil, err
			}
			db, err := d.DB(ctx)
			if err != nil {
				return nil, err
			}
			p, err := imoutbox.NewPublisher(cfg, db)
			if err != nil {
				return nil, err
			}
			return leavingOnStop(d, "publish-im", p, member), nil
		},
	}
}

// CheckPublishIM validates the keys of `roomflow publish-im` (the IM
// credentials included) the way its start does, before anything connects.
func CheckPublishIM(d *app.Deps) error {
	_, err := imPublisherConfig(d, "")
	return err
}
