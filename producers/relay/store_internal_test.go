package relay

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hyapp/roomflow/internal/testenv"
)

// positionReader is a fenced-in transactional producer of relay name on
// k's offsets topic, as a new leader has before it loads the position.
func positionReader(t *testing.T, k *testenv.Kafka, name string) producer {
	t.Helper()
	watch := k.Cluster().NewCommitWatch(Component)
	cl, err := k.Cluster().NewClient(Component, kgo.TransactionalID(name),
		kgo.RecordPartitioner(newPartitioner(k.Config.Topics.RelayOffsets)), watch.Opt())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	txn := producer{cl, watch}
	if _, _, err := txn.ProducerID(context.Background()); err != nil {
		t.Fatal(err)
	}
	return txn
}

// TestPositionReadTakesAsLongAsItProgresses: a takeover reads the offsets
// partition from its start, which holds whatever compaction has not
// removed yet (the active segment never is). A read that keeps receiving
// records is not cut at the transaction timeout however long the whole
// takes; a partition where nothing arrives for that long still is.
func TestPositionReadTakesAsLongAsItProgresses(t *testing.T) {
	k := testenv.NewKafka(t)
	if k.Fake == nil {
		t.Skip("needs kfake: fetches are slowed by request control")
	}
	ctx := context.Background()
	topic, name := k.Config.Topics.RelayOffsets, testenv.UniqueName(t)
	// 20 MB before the position: another relay's positions, read one a
	// fetch, each fetch answered after 100ms, so the read takes over 4s
	// against a wait of 1s.
	filler, err := k.Cluster().NewClient(Component+"-filler", kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		t.Fatal(err)
	}
	defer filler.Close()
	for range 40 {
		if err := filler.ProduceSync(ctx, positionRecord(topic, name+"-other", bytes.Repeat([]byte{1}, 500_000))).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := filler.ProduceSync(ctx, positionRecord(topic, name, EncodePosition(Position{High: 42}))).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var slow atomic.Bool
	slow.Store(true)
	k.Fake.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		k.Fake.KeepControl()
		if slow.Load() {
			k.Fake.SleepControl(func() { time.Sleep(100 * time.Millisecond) })
		}
		return nil, nil, false
	})
	const wait = time.Second
	opts := append(k.Cluster().Opts(Component+"-position"), kgo.FetchMaxBytes(400_000), kgo.FetchMaxPartitionBytes(400_000))
	start := time.Now()
	pos, found, err := loadPosition(ctx, positionReader(t, k, name), opts, topic, name, wait)
	if err != nil || !found || pos.High != 42 {
		t.Fatalf("after %s: position %+v found %v err %v, want high 42", time.Since(start).Round(time.Millisecond), pos, found, err)
	}
	if took := time.Since(start); took < 2*wait {
		t.Errorf("the read took %s: not slower than the wait, so it proves nothing", took)
	}

	// A transaction of another producer left open holds the partition's
	// last stable offset: nothing more arrives, and the read gives up
	// after the wait.
	slow.Store(false)
	other := positionReader(t, k, name+"-open")
	if err := other.begin(); err != nil {
		t.Fatal(err)
	}
	if err := other.ProduceSync(ctx, positionRecord(topic, name+"-open", EncodePosition(Position{High: 1}))).FirstErr(); err != nil {
		t.Fatal(err)
	}
	_, _, err = loadPosition(ctx, positionReader(t, k, name), opts, topic, name, wait)
	if !errors.Is(err, errProbeUnseen) {
		t.Fatalf("read behind an open transaction returned %v, want errProbeUnseen", err)
	}
}
