package app

import (
	"context"
	"errors"
	"time"

	"github.com/hyapp/roomflow/internal/kafkax"
)

// StaticMember is one static membership of a component: its consumer
// group and member id ("": a dynamic member, nothing to leave).
type StaticMember struct{ Group, ID string }

// LeavingOnStop runs c and, when it stopped because the process is being
// stopped (SIGTERM: a scale-down, a rollout), makes its static members
// leave their groups so the partitions move at once. After a crash (kill
// -9, OOM) or a failure (c's own, or another component's, which cancels
// ctx with that error as its cause) nothing leaves: the restart under the
// same id takes the partitions straight back.
func LeavingOnStop(d *Deps, component string, c Component, members ...StaticMember) Component {
	return ComponentFunc(func(ctx context.Context) error {
		err := c.Run(ctx)
		if err != nil || !errors.Is(context.Cause(ctx), context.Canceled) {
			return err
		}
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		for _, m := range members {
			if m.ID == "" {
				continue
			}
			if err := kafkax.LeaveGroup(lctx, d.Config.Kafka.Cluster(nil, d.Log), component, m.Group, m.ID); err != nil {
				// Not fatal: the session timeout frees the partitions.
				d.Log.Warn("static member did not leave its group", "component", component, "group", m.Group, "instance_id", m.ID, "error", err)
				continue
			}
			d.Log.Info("static member left its group", "component", component, "group", m.Group, "instance_id", m.ID)
		}
		return nil
	})
}
