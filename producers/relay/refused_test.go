package relay_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/producers/relay"
)

// answerJoinGroup makes the fake broker answer the next n JoinGroup
// requests (every one for n < 0) with code.
func answerJoinGroup(k *testenv.Kafka, n int, code int16) {
	for i := 0; i < max(n, 1); i++ {
		k.Fake.ControlKey(int16(kmsg.JoinGroup), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
			if n < 0 {
				k.Fake.KeepControl()
			}
			resp := kreq.(*kmsg.JoinGroupRequest).ResponseKind().(*kmsg.JoinGroupResponse)
			resp.ErrorCode = code
			return resp, nil, true
		})
	}
}

// TestBrokerRefusalEndsRun: settings a broker refuses for good (a leader
// group session outside group.max.session.timeout.ms, no group ACL, a
// transaction timeout above transaction.max.timeout.ms) end Run with a
// *relay.RefusedError naming the refusal (Ready reports it), instead of a
// relay that reports ready and never leads. A refusal of the moment (the coordinator still
// loading) is retried and the relay leads.
func TestBrokerRefusalEndsRun(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []kfake.Opt
		set  func(*testenv.Kafka, *relay.Config)
		want error // nil: the relay leads
	}{
		{name: "session timeout", opts: []kfake.Opt{kfake.GroupMaxSessionTimeout(5 * time.Minute)},
			set: func(_ *testenv.Kafka, c *relay.Config) { c.FailoverTimeout = 10 * time.Minute }, want: kerr.InvalidSessionTimeout},
		{name: "group ACL", set: func(k *testenv.Kafka, _ *relay.Config) {
			answerJoinGroup(k, -1, kerr.GroupAuthorizationFailed.Code)
		}, want: kerr.GroupAuthorizationFailed},
		{name: "transaction timeout", opts: []kfake.Opt{kfake.BrokerConfigs(map[string]string{"transaction.max.timeout.ms": "60000"})},
			set: func(_ *testenv.Kafka, c *relay.Config) { c.FailoverTimeout = 2 * time.Minute }, want: kerr.InvalidTransactionTimeout},
		{name: "coordinator loading", set: func(k *testenv.Kafka, _ *relay.Config) {
			answerJoinGroup(k, 3, kerr.CoordinatorLoadInProgress.Code)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := testenv.NewKafka(t, testenv.FakeOpts(append([]kfake.Opt{kfake.GroupMinSessionTimeout(200 * time.Millisecond)}, tc.opts...)...))
			if k.Fake == nil {
				t.Skip("needs kfake: the refusals are broker settings or injected answers")
			}
			m := testenv.NewMySQL(t)
			cfg := testConfig(t, k)
			tc.set(k, &cfg)
			x := startRelay(t, cfg, m.DB, quietLogger(t))
			if err := insertRows(context.Background(), m.DB, rowsOf("a", "room-a", 0, 3)); err != nil {
				t.Fatal(err)
			}
			if tc.want == nil {
				waitCount(t, k, cfg.Topic, 3, 30*time.Second)
				select {
				case <-x.done:
					t.Fatalf("Run returned %v after a transient refusal", x.err)
				default:
				}
				return
			}
			select {
			case <-x.done:
			case <-time.After(30 * time.Second):
				t.Fatalf("Run still running 30s after the broker refused it; Ready() = %v", x.r.Ready())
			}
			var refused *relay.RefusedError
			if !errors.As(x.err, &refused) || !errors.Is(x.err, tc.want) {
				t.Fatalf("Run returned %v, want a *relay.RefusedError of %v", x.err, tc.want)
			}
			if err := x.r.Ready(); !errors.Is(err, tc.want) {
				t.Fatalf("Ready() = %v after the refusal, want it", err)
			}
		})
	}
}
