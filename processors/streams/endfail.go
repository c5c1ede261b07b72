package streams

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// commitErrorCause is the txn_aborts cause of a commit that kgo aborted
// after a failed TxnOffsetCommit (see endAborted).
const commitErrorCause = "commit_error"

// silentAbortCause is the txn_aborts cause of a commit franz-go ended as
// an abort without an error (kafkax.CommitWatch).
const silentAbortCause = "silent_abort"

// endAborted reports whether err, returned by ending a transaction with a
// commit, left the transaction aborted and the producer usable, so the
// runtime rewinds (as for any abort) instead of stopping.
//
// GroupTransactSession.End answers a TxnOffsetCommit error it does not
// retry itself (REQUEST_TIMED_OUT when the broker's offsets append timed
// out, ...) by aborting with EndTxn and returning the commit error; kgo
// has already reset the consume position to the committed offsets. Every
// other End error — a flush cut short, an EndTxn that failed or whose
// outcome is unknown — leaves kgo in the transaction (or its producer id
// failed), so a new transaction cannot begin. That is the test: begin one
// (and end it at once, nothing produced, no request sent). A fenced
// producer stays fatal whatever kgo's state. On true, it logs a WARN and
// backs off (doubling while commits keep failing, up to the retry
// back-off maximum; cut short when Run's context ends).
func (x *txn) endAborted(ctx context.Context, err error) bool {
	if x.sh.killed.Load() || errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) ||
		errors.Is(err, kerr.TransactionalIDAuthorizationFailed) || errors.Is(err, kerr.InvalidProducerIDMapping) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if x.sh.sess.Begin() != nil {
		return false
	}
	if x.sh.client().EndTransaction(ctx, kgo.TryAbort) != nil {
		return false
	}
	b := &x.commitErr
	if b.backoff > 0 && b.seq == x.seq {
		b.backoff = min(2*b.backoff, x.sh.cfg.RetryBackoffMax)
	} else {
		b.backoff = x.sh.cfg.RetryBackoffMin
	}
	b.seq = x.seq + 1 // the sequence number once this transaction has ended
	x.sh.log.Warn("transaction commit failed and was aborted; consumption rewound to the last commit",
		"cause", commitErrorCause, "records", x.counts.in, "backoff", b.backoff.String(), "error", err)
	t := time.NewTimer(retryJitter.Jitter(b.backoff))
	defer t.Stop()
	select {
	case <-t.C:
	case <-x.sh.ctx.Done():
	}
	return true
}
