package command

import (
	"context"
	"errors"
	"time"

	"github.com/spf13/pflag"

	"github.com/hyapp/roomflow/internal/app"
	"github.com/hyapp/roomflow/internal/kafkax"
)

// instanceIDFlag defines --instance-id, which every component command and
// `run` share.
func instanceIDFlag(fs *pflag.FlagSet) {
	fs.String("instance-id", "", "this replica's stable id, unique per replica (the pod name): static group membership "+
		"as <id>-<component>, so a restarted process takes its partitions straight back; "+
		"default none (dynamic members)")
}

// memberID is component's static group member id, "<instance-id>-<component>",
// or "" (a dynamic member) without --instance-id. The suffix keeps the ids
// of the groups one process joins (relay, room, mic, sink, publish-im)
// apart even where two of them were configured with the same group name.
func memberID(d *app.Deps, component string) string {
	id := d.Flag("instance-id")
	if id == "" {
		return ""
	}
	return id + "-" + component
}

// staticMember is one static membership of a component: group and id.
type staticMember struct{ group, id string }

// leavingOnStop runs c and, when it stopped because the process is being
// stopped (SIGTERM: a scale-down, a rollout), makes its static members
// leave their groups so the partitions move at once. After a crash (kill
// -9, OOM) or a failure (c's own, or another component's, which cancels
// ctx with that error as its cause) nothing leaves: the restart under the
// same id takes the partitions straight back.
func leavingOnStop(d *app.Deps, component string, c app.Component, members ...staticMember) app.Component {
	return app.ComponentFunc(func(ctx context.Context) error {
		err := c.Run(ctx)
		if err != nil || !errors.Is(context.Cause(ctx), context.Canceled) {
			return err
		}
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		for _, m := range members {
			if m.id == "" {
				continue
			}
			if err := kafkax.LeaveGroup(lctx, d.Config.Kafka.Cluster(nil, d.Log), component, m.group, m.id); err != nil {
				// Not fatal: the session timeout frees the partitions.
				d.Log.Warn("static member did not leave its group", "component", component, "group", m.group, "instance_id", m.id, "error", err)
				continue
			}
			d.Log.Info("static member left its group", "component", component, "group", m.group, "instance_id", m.id)
		}
		return nil
	})
}
