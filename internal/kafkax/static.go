package kafkax

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// LeaveGroup takes the static member instanceID out of group at once, with
// a short-lived client of its own. kgo's Close never leaves the group as a
// static member (a restart with the same id is meant to take the
// partitions straight back, KIP-345), so a member stopped on purpose
// (SIGTERM on a scale-down, or a rollout that starts the replacement under
// another pod name) would otherwise hold its partitions until the session
// timeout. Call it after the member's own client is closed: a member that
// is still running would rejoin. An id the group no longer knows (expired,
// or already replaced by a restart) is not an error.
func LeaveGroup(ctx context.Context, cluster Cluster, component, group, instanceID string) error {
	cluster.Metrics = nil
	cl, err := cluster.NewClient(component + "-leave")
	if err != nil {
		return fmt.Errorf("leave group %s: %w", group, err)
	}
	defer cl.Close()
	resps, err := kadm.NewClient(cl).LeaveGroup(ctx, kadm.LeaveGroup(group).InstanceIDs(instanceID).Reason("roomflow: stopped"))
	if err == nil {
		err = resps.Error()
	}
	if err != nil && !errors.Is(err, kerr.UnknownMemberID) && !errors.Is(err, kerr.GroupIDNotFound) {
		return fmt.Errorf("leave group %s as %s: %w", group, instanceID, err)
	}
	return nil
}
