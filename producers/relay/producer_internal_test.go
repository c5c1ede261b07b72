package relay

import (
	"context"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/testenv"
)

// TestProducerCommitSilentAbort: a commit during which franz-go logged that
// it ended the transaction as an abort fails with errSilentAbort (the
// line is injected here: franz-go emits it only on a rare race); the next
// transaction, begun afresh, commits.
func TestProducerCommitSilentAbort(t *testing.T) {
	k := testenv.NewKafka(t)
	topic := k.Config.Topics.RelayOffsets
	watch := k.Cluster().NewCommitWatch(Component)
	cl, err := k.Cluster().NewClient(Component, kgo.TransactionalID(testenv.UniqueName(t)), watch.Opt())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	p := producer{cl, watch}
	ctx := context.Background()
	for i, silent := range []bool{true, false} {
		if err := p.begin(); err != nil {
			t.Fatal(err)
		}
		if err := p.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if silent {
			watch.Log(kgo.LogLevelInfo, "no produce succeeded in this transaction but produces were attempted; issuing an abort")
		}
		err := p.commit(ctx)
		if silent && !errors.Is(err, errSilentAbort) {
			t.Fatalf("transaction %d: commit after a silent abort returned %v, want errSilentAbort", i, err)
		}
		if !silent && err != nil {
			t.Fatalf("transaction %d: commit: %v", i, err)
		}
	}
}
