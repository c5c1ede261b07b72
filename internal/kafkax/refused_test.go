package kafkax_test

import (
	"context"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/kafkax"
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
