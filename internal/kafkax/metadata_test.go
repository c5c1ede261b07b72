package kafkax_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/testenv"
)

// A produce answered NOT_LEADER_FOR_PARTITION makes kgo refresh metadata
// before it retries, and kgo spaces refreshes by MetadataMinAge (default
// 5s). Right after a refresh, one such answer held a relay's batch ~5 s and
// two could outlast its 10 s transaction (issue 10, chaos finding 2).
// Cluster's clients use MetadataRefreshMin, so the retry follows within it.
func TestNotLeaderProduceRetriesWithoutTheMetadataPause(t *testing.T) {
	k := testenv.NewKafka(t, testenv.Partitions(1))
	if k.Fake == nil {
		t.Skip("needs kfake fault injection; ROOMFLOW_KAFKA_BROKERS is set")
	}
	cl, err := k.Cluster().NewClient("metatest", kgo.DefaultProduceTopic(k.Config.Topics.RoomEvents))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The first produce loads metadata; the next one is answered NOT_LEADER
	// just after that refresh, when kgo's default would wait out 5s.
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("warm")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		k.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: k.Config.Topics.RoomEvents, Err: kerr.NotLeaderForPartition})
		start := time.Now()
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took > kafkax.MetadataRefreshMin+2*time.Second {
			t.Fatalf("produce after one NOT_LEADER answer took %s, want about kafkax.MetadataRefreshMin (%s)", took, kafkax.MetadataRefreshMin)
		}
	}
}
