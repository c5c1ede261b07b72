package kafkax_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/testenv"
)

// TestRefusedGroup: the errors a group member's poll brings that no retry
// changes (group and topic ACLs, a session timeout or group id the broker
// refuses) make a *GroupRefusedError naming the group, the broker's error
// (without franz-go's wrapping) and, for a topic, the topic; the errors of
// the moment (a coordinator moving or loading, a rebalance, a topic not
// created yet, a cancelled poll) make none.
func TestRefusedGroup(t *testing.T) {
	session := func(err error) error { return &kgo.ErrGroupSession{Err: err} }
	for _, tc := range []struct {
		topic string
		err   error
		want  *kerr.Error // nil: not refused
	}{
		{"", session(kerr.GroupAuthorizationFailed), kerr.GroupAuthorizationFailed},
		{"", session(kerr.InvalidSessionTimeout), kerr.InvalidSessionTimeout},
		{"", session(kerr.InvalidGroupID), kerr.InvalidGroupID},
		{"in", kerr.TopicAuthorizationFailed, kerr.TopicAuthorizationFailed},
		{"", session(kerr.FencedInstanceID), kerr.FencedInstanceID},
		{"", session(kerr.CoordinatorLoadInProgress), nil},
		{"", session(kerr.NotCoordinator), nil},
		{"", session(kerr.CoordinatorNotAvailable), nil},
		{"", session(kerr.RebalanceInProgress), nil},
		{"", session(kerr.GroupMaxSizeReached), nil},
		{"in", kerr.UnknownTopicOrPartition, nil},
		{"", context.Canceled, nil},
	} {
		fs := kgo.Fetches{{Topics: []kgo.FetchTopic{{Topic: tc.topic, Partitions: []kgo.FetchPartition{{Partition: -1, Err: tc.err}}}}}}
		err := kafkax.RefusedGroup("g", fs)
		if tc.want == nil {
			if err != nil {
				t.Errorf("%v: refused (%v), want retried", tc.err, err)
			}
			continue
		}
		var ge *kafkax.GroupRefusedError
		if !errors.As(err, &ge) || ge.Group != "g" || ge.Err != tc.want || ge.Topic != tc.topic || !errors.Is(err, tc.want) {
			t.Errorf("%v: got %#v, want a *GroupRefusedError of group g, topic %q, error %v", tc.err, err, tc.topic, tc.want)
		}
	}
	if err := kafkax.RefusedGroup("g", nil); err != nil {
		t.Errorf("no errors: got %v", err)
	}
}

// Two live processes with one static member id (a duplicated --instance-id)
// fence each other: the broker answers the replaced member
// FENCED_INSTANCE_ID, and kgo, left to itself, rejoins, which fences the
// other in turn, so both keep flapping, ready, each owning the partitions
// part of the time. It is the member's setting, not the moment: the poll
// that brings it must count as refused (the Java consumer's
// FencedInstanceIdException is fatal too).
func TestRefusedGroupFencedInstance(t *testing.T) {
	k := testenv.NewKafka(t, testenv.Partitions(1))
	group := testenv.UniqueName(t)
	member := func(name string) *kgo.Client {
		cl, err := k.Cluster().NewClient(name, kgo.ConsumerGroup(group), kgo.ConsumeTopics(k.Config.Topics.RoomEvents),
			kgo.InstanceID("pod-0-sink"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	first := member("first")
	pctx, cancel := context.WithTimeout(ctx(t), 2*time.Second)
	first.PollFetches(pctx) // joined
	cancel()
	testenv.Eventually(t, 20*time.Second, "the first member owns the partition", func() bool {
		d, err := k.Admin(t).DescribeGroups(ctx(t), group)
		return err == nil && d[group].State == "Stable" && len(d[group].Members) == 1
	})
	second := member("second")
	go func() {
		for second.Context().Err() == nil {
			second.PollFetches(second.Context())
		}
	}()
	var refused error
	deadline := time.Now().Add(20 * time.Second)
	for refused == nil && time.Now().Before(deadline) {
		pctx, cancel := context.WithTimeout(ctx(t), time.Second)
		fs := first.PollFetches(pctx)
		cancel()
		for _, fe := range fs.Errors() {
			if errors.Is(fe.Err, kerr.FencedInstanceID) {
				refused = kafkax.RefusedGroup(group, fs)
				if refused == nil {
					t.Fatalf("poll brought %v: not counted as refused", fe.Err)
				}
			}
		}
	}
	var ge *kafkax.GroupRefusedError
	if !errors.As(refused, &ge) || !errors.Is(refused, kerr.FencedInstanceID) {
		t.Fatalf("the replaced member: %v, want a *GroupRefusedError of FENCED_INSTANCE_ID", refused)
	}
}
