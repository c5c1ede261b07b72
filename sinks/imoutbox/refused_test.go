package imoutbox_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/testenv"
)

// TestGroupRefusalEndsRun: a fast path whose consumer group the broker
// refuses for good (no group ACL: every JoinGroup answered
// GROUP_AUTHORIZATION_FAILED) ends the publisher's Run with a
// *kafkax.GroupRefusedError naming the group, instead of a publish-im
// that runs on with its fast path owning nothing (and, the IM share
// following owned partitions, sending nothing).
func TestGroupRefusalEndsRun(t *testing.T) {
	e := newEnv(t, true)
	if e.k.Fake == nil {
		t.Skip("needs kfake: the refusal is an injected answer")
	}
	e.k.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.JoinGroup}, Group: e.cfg.Group, Err: kerr.GroupAuthorizationFailed, Count: -1})
	p, _ := e.newPublisher(fastAndScan)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	select {
	case err := <-done:
		var ge *kafkax.GroupRefusedError
		if !errors.As(err, &ge) || ge.Group != e.cfg.Group || !errors.Is(err, kerr.GroupAuthorizationFailed) {
			t.Fatalf("Run returned %v, want a *kafkax.GroupRefusedError of group %s, GROUP_AUTHORIZATION_FAILED", err, e.cfg.Group)
		}
	case <-time.After(10 * time.Second):
		cancel()
		<-done
		t.Fatal("Run still running 10s after the broker refused the fast path's group")
	}
}

// TestTransientGroupErrorIsRetried: a group coordinator not available for
// a while (JoinGroup answered COORDINATOR_NOT_AVAILABLE three times) is
// retried, not a refusal: the fast path then joins and delivers.
func TestTransientGroupErrorIsRetried(t *testing.T) {
	e := newEnv(t, true)
	if e.k.Fake == nil {
		t.Skip("needs kfake: the error is an injected answer")
	}
	unavailable := e.k.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.JoinGroup}, Group: e.cfg.Group, Err: kerr.CoordinatorNotAvailable, Count: 3})
	var evs []event
	for i := range 20 {
		evs = append(evs, gift(fmt.Sprintf("tr-%02d", i), fmt.Sprintf("r%d", i%4), int64(i/4+1)))
	}
	e.produce(e.insert(0, evs...), evs)
	p, _ := e.newPublisher(fastOnly)
	stop := e.run(p) // fails the test if Run returns an error
	testenv.Eventually(t, 20*time.Second, "fast path delivered every event", func() bool { return e.countStatus("delivered") == len(evs) })
	stop()
	if n := unavailable.Hits(); n != 3 {
		t.Fatalf("%d JoinGroups answered COORDINATOR_NOT_AVAILABLE, want 3", n)
	}
	e.checkRoomOrder()
}
