package kafkax_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/testenv"
)

// A group member whose JoinGroup the coordinator does not answer (a
// rebalance waiting for a member that is gone) cannot leave: kgo's Close
// waits for the join, up to the rebalance timeout. CloseWithin returns at
// the end of its context instead (issue 10, chaos finding 3).
func TestCloseWithinBoundsAHeldJoinGroup(t *testing.T) {
	k := testenv.NewKafka(t, testenv.Partitions(1))
	if k.Fake == nil {
		t.Skip("needs kfake request control to hold a JoinGroup; ROOMFLOW_KAFKA_BROKERS is set")
	}
	group := testenv.UniqueName(t)
	held := k.HoldJoinGroups(t, group)
	cl, err := k.Config.Cluster(nil, nil).NewClient("closetest",
		kgo.ConsumerGroup(group), kgo.ConsumeTopics(k.Config.Topics.RoomEvents), kgo.RebalanceTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	go cl.PollFetches(context.Background()) // returns once the client is closed
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the client never sent a JoinGroup")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	returned := make(chan bool, 1)
	go func() { returned <- kafkax.CloseWithin(ctx, cl, slog.Default()) }()
	select {
	case closed := <-returned:
		if closed {
			t.Fatal("CloseWithin reported a finished close while the JoinGroup was still held")
		}
	case <-time.After(20 * time.Second): // kgo alone waits 70s
		t.Fatal("CloseWithin did not return at the end of its context")
	}
}
