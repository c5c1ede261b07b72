package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/producers/relay"
)

// TestFencedLeaderCannotCommit pins a leader between flushing a batch and
// committing it, lets another producer of the same transactional id
// initialise (as a new leader does on takeover) and commit, then releases
// the old leader: its commit must fail, and none of its records may become
// visible to read_committed consumers.
func TestFencedLeaderCannotCommit(t *testing.T) { forModes(t, testFencedLeaderCannotCommit) }

func testFencedLeaderCannotCommit(t *testing.T, mode relayMode) {
	k := newKafka(t)
	m := mode.mysql(t)
	cfg := mode.config(testConfig(t, k), m)
	ctx := context.Background()

	pinned := make(chan relay.BatchInfo, 1)
	release := make(chan struct{})
	result := make(chan error, 1)
	first := true
	hooks := relay.Hooks{
		BeforeCommit: func(_ context.Context, b relay.BatchInfo) {
			if first {
				first = false
				pinned <- b
				<-release
			}
		},
		AfterCommit: func(b relay.BatchInfo, err error) {
			select {
			case result <- err:
			default:
			}
		},
	}
	x := startRelay(t, withHooks(cfg, hooks), m.DB, nil)
	if err := insertRows(ctx, m.DB, seq("f", 1, 50, "room-f")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-pinned:
	case <-time.After(30 * time.Second):
		t.Fatal("relay never reached its first commit")
	}

	// The "new leader": same transactional id, InitProducerID, one
	// committed transaction.
	usurper := k.Client(t, kgo.TransactionalID(cfg.TransactionalID))
	if _, _, err := usurper.ProducerID(ctx); err != nil {
		t.Fatal(err)
	}
	if err := usurper.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := usurper.ProduceSync(ctx, &kgo.Record{Topic: cfg.DLQTopic, Value: []byte("usurper")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := usurper.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}

	close(release)
	select {
	case err := <-result:
		if err == nil {
			t.Fatal("fenced leader committed its batch")
		}
		t.Logf("fenced leader's commit failed: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no commit attempt after release")
	}
	usurper.Close()
	x.stop(t)
	if got := drain(t, k, cfg.Topic); len(got) != 0 {
		// The relay retried after being fenced and fenced the usurper in
		// turn: then the rows are there, but exactly once.
		checkExactlyOnce(t, loadOracle(t, m.DB), got)
	}
}
