package relay

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/kafkax"
)

// errSilentAbort is a commit franz-go ended as an abort without an error
// (kafkax.CommitWatch): nothing of the transaction was committed.
var errSilentAbort = errors.New("relay: commit: franz-go ended the transaction as an abort (no partition counted as added); nothing was committed")

// producer is a leader session's transactional client with the watch that
// tells a commit franz-go turned into an abort. The relay's transactions
// are producer-only, the kind that can end so; taking one for a commit
// would let the next batch's position pass the rows of this one.
type producer struct {
	*kgo.Client
	watch *kafkax.CommitWatch
}

// begin starts a transaction.
func (p producer) begin() error {
	p.watch.Reset()
	return p.BeginTransaction()
}

// commit ends the open transaction with a commit; errSilentAbort if
// franz-go aborted it instead.
func (p producer) commit(ctx context.Context) error {
	if err := p.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return err
	}
	if p.watch.Aborted() {
		return errSilentAbort
	}
	return nil
}
