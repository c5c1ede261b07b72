package streams_test

import (
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/processors/streams/rttest"
)

// TestGroupRefusalEndsRun: a consumer group the broker refuses for good
// (no group ACL: every JoinGroup answered GROUP_AUTHORIZATION_FAILED) ends
// Run with a *kafkax.GroupRefusedError naming the group, and Ready reports
// it, instead of a runtime that reports ready and never gets a partition.
func TestGroupRefusalEndsRun(t *testing.T) {
	h := newHarness(t, 2)
	if h.k.Fake == nil {
		t.Skip("needs kfake: the refusal is an injected answer")
	}
	h.k.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.JoinGroup}, Group: h.grp, Err: kerr.GroupAuthorizationFailed, Count: -1})
	rt := h.runtime("refused", counter{out: h.out, dump: h.dump})
	run := rttest.Start(rt)
	defer run.Cancel()
	select {
	case err := <-run.Done:
		var ge *kafkax.GroupRefusedError
		if !errors.As(err, &ge) || ge.Group != h.grp || !errors.Is(err, kerr.GroupAuthorizationFailed) {
			t.Fatalf("Run returned %v, want a *kafkax.GroupRefusedError of group %s, GROUP_AUTHORIZATION_FAILED", err, h.grp)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("Run still running 10s after the broker refused its group; Ready() = %v", rt.Ready())
	}
	if err := rt.Ready(); !errors.Is(err, kerr.GroupAuthorizationFailed) {
		t.Fatalf("Ready() = %v after the refusal, want it", err)
	}
}

// TestTransientGroupErrorIsRetried: a group coordinator still loading
// (JoinGroup answered COORDINATOR_LOAD_IN_PROGRESS three times) is
// retried, not a refusal: the runtime then joins and counts its input.
func TestTransientGroupErrorIsRetried(t *testing.T) {
	h := newHarness(t, 2)
	if h.k.Fake == nil {
		t.Skip("needs kfake: the error is an injected answer")
	}
	loading := h.k.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.JoinGroup}, Group: h.grp, Err: kerr.CoordinatorLoadInProgress, Count: 3})
	_, run, oracle := h.counting("transient", 40, 4)
	run.Stop(t)
	if n := loading.Hits(); n != 3 {
		t.Fatalf("%d JoinGroups answered COORDINATOR_LOAD_IN_PROGRESS, want 3", n)
	}
	checkCounts(t, rttest.ReadCommitted(t, h.k.Brokers, h.out, 40, 200*time.Millisecond, 30*time.Second), oracle)
}
