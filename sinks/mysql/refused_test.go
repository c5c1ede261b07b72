package mysqlsink_test

import (
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/obs"
	"github.com/hyapp/roomflow/sinks/mysql/sinktest"
)

// TestGroupRefusalEndsRun: a consumer group the broker refuses for good
// (no group ACL: every JoinGroup answered GROUP_AUTHORIZATION_FAILED; no
// ACL on an input topic: its metadata answered TOPIC_AUTHORIZATION_FAILED)
// ends Run with a *kafkax.GroupRefusedError naming the group (and the
// topic) and fails the sink's readiness, instead of a sink that reports
// ready and applies nothing.
func TestGroupRefusalEndsRun(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(e *env) kfake.Fault
		want  error
		topic func(e *env) string // the refused topic, "" for the group
	}{
		{name: "group ACL", fault: func(e *env) kfake.Fault {
			return kfake.Fault{Keys: []kmsg.Key{kmsg.JoinGroup}, Group: e.cfg.Group, Err: kerr.GroupAuthorizationFailed, Count: -1}
		}, want: kerr.GroupAuthorizationFailed, topic: func(*env) string { return "" }},
		{name: "topic ACL", fault: func(e *env) kfake.Fault {
			return kfake.Fault{Keys: []kmsg.Key{kmsg.Metadata}, Topic: e.inflowTopic(), Err: kerr.TopicAuthorizationFailed, Count: -1}
		}, want: kerr.TopicAuthorizationFailed, topic: (*env).inflowTopic},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 1)
			if e.k.Fake == nil {
				t.Skip("needs kfake: the refusal is an injected answer")
			}
			e.k.Fake.Fault(tc.fault(e))
			cfg := e.cfg
			cfg.Health = obs.NewHealth()
			r := e.start(t, cfg)
			select {
			case err := <-r.done:
				r.cancel()
				r.cancel = nil // returned already: nothing for stop to wait for
				var ge *kafkax.GroupRefusedError
				if !errors.As(err, &ge) || ge.Group != cfg.Group || ge.Topic != tc.topic(e) || !errors.Is(err, tc.want) {
					t.Fatalf("Run returned %v, want a *kafkax.GroupRefusedError of group %s, topic %q, %v", err, cfg.Group, tc.topic(e), tc.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("Run still running 10s after the broker refused its group; readiness %v", cfg.Health.Ready())
			}
			if err := cfg.Health.Ready(); err == nil {
				t.Fatal("the sink reports ready after the refusal")
			}
		})
	}
}

// TestTransientGroupErrorIsRetried: a group coordinator that moved
// (JoinGroup answered NOT_COORDINATOR three times) is retried, not a
// refusal: the sink then joins and applies everything.
func TestTransientGroupErrorIsRetried(t *testing.T) {
	e := newEnv(t, 1)
	if e.k.Fake == nil {
		t.Skip("needs kfake: the error is an injected answer")
	}
	moved := e.k.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.JoinGroup}, Group: e.cfg.Group, Err: kerr.NotCoordinator, Count: 3})
	o := e.produce(t, sinktest.NewLedgerGen(47, appCode, 10).Next(50), sinktest.NewInflowGen(47, appCode, 5, 5).Next(20))
	e.applyAll(t, o)
	if n := moved.Hits(); n != 3 {
		t.Fatalf("%d JoinGroups answered NOT_COORDINATOR, want 3", n)
	}
}
