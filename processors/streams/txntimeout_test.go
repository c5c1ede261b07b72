package streams_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/processors/streams/rttest"
)

// The broker behaviour behind Config's transaction bounds, on the
// runtime's own options (a transactional id, a transaction timeout): a
// transaction still open when its timeout passes is aborted by the broker
// and its commit fails, so a commit interval at or above the timeout never
// commits anything (before the bound, a processor with commit_interval
// above its 30s ran, logged INVALID_PRODUCER_EPOCH and PRODUCER_FENCED,
// and committed no output). A timeout above the brokers' default
// transaction.max.timeout.ms starts no transaction at all.
func TestBrokerTransactionTimeouts(t *testing.T) {
	k := testenv.NewKafka(t, testenv.Partitions(1))
	if k.Fake == nil {
		t.Skip("needs kfake: a real broker aborts timed-out transactions only every transaction.abort.timed.out.transaction.cleanup.interval.ms")
	}
	topic := k.Config.Topics.UserMicEvents
	ctx := context.Background()
	commitAfter := func(id string, timeout, open time.Duration) error {
		cl := k.Client(t, kgo.TransactionalID(id), kgo.TransactionTimeout(timeout))
		if err := cl.BeginTransaction(); err != nil {
			return err
		}
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(id)}).FirstErr(); err != nil {
			return err
		}
		time.Sleep(open)
		return cl.EndTransaction(ctx, kgo.TryCommit)
	}

	if err := commitAfter("within", time.Second, 300*time.Millisecond); err != nil {
		t.Fatalf("a transaction committed within its timeout: %v", err)
	}
	if err := commitAfter("past", time.Second, 1500*time.Millisecond); err == nil {
		t.Fatal("a transaction open past its timeout committed")
	}
	got := rttest.ReadCommitted(t, k.Brokers, topic, 1, 500*time.Millisecond, 10*time.Second)
	if len(got) != 1 || string(got[0].Value) != "within" {
		t.Fatalf("committed %d records (%v), want only the one committed within its timeout", len(got), got)
	}

	err := commitAfter("too-long", kafkax.MaxTransactionTimeout+time.Millisecond, 0)
	if !errors.Is(err, kerr.InvalidTransactionTimeout) {
		t.Fatalf("transaction timeout above transaction.max.timeout.ms: %v, want INVALID_TRANSACTION_TIMEOUT", err)
	}
	if err := commitAfter("at-limit", kafkax.MaxTransactionTimeout, 0); err != nil {
		t.Fatalf("transaction timeout at transaction.max.timeout.ms: %v", err)
	}
}
