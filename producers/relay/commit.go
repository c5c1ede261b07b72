package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// refusal is what the broker's refusals of a row decided for its next
// attempts (see Relay.refusals).
type refusal struct {
	suspect bool      // in a refused produce batch: produce it alone
	restamp bool      // refused alone for its timestamp: the relay's time next
	dlq     DLQReason // refused alone otherwise: dead-lettered next
}

func (r *Relay) refusal(id uint64) refusal {
	r.refusedMu.Lock()
	defer r.refusedMu.Unlock()
	return r.refusals[id]
}

// settle records what producing row id alone answered: refused for its
// timestamp, it gets the relay's time next; refused again or otherwise, a
// relayed row goes to the DLQ next.
func (r *Relay) settle(id uint64, dlq DLQReason, err error) {
	r.refusedMu.Lock()
	defer r.refusedMu.Unlock()
	rf := r.refusals[id]
	rf.suspect = false
	switch {
	case err == nil || !refused(err):
	case errors.Is(err, kerr.InvalidTimestamp) && !rf.restamp:
		rf.restamp = true
	case dlq == "":
		rf.dlq = DLQRejected
	}
	if rf == (refusal{}) {
		delete(r.refusals, id)
		return
	}
	r.refusals[id] = rf
}

// refused reports whether a produce error means the broker will never take
// the record as it is (as opposed to a transient or fencing error).
func refused(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge) ||
		errors.Is(err, kerr.InvalidRecord) || errors.Is(err, kerr.CorruptMessage) ||
		errors.Is(err, kerr.InvalidTimestamp)
}

// notedRow is a row of a batch that goes to the DLQ or whose record is
// stamped with the relay's time, and why.
type notedRow struct {
	row     *Row
	dlq     DLQReason
	restamp RestampReason
}

// commit writes b and its position in one transaction. Any error leaves
// the transaction aborted (or its outcome to be settled by the next
// session's InitProducerID) and is returned; the caller ends the session.
func (r *Relay) commit(ctx context.Context, txn producer, b *batch) error {
	if err := txn.begin(); err != nil {
		return fmt.Errorf("relay: begin transaction: %w", err)
	}
	var res produced
	noted, err := r.produceRows(ctx, txn.Client, b, &res)
	if err != nil {
		r.abort(txn.Client)
		return err
	}
	for _, a := range b.abandoned {
		txn.Produce(ctx, r.router.GapRecord(a), func(_ *kgo.Record, err error) {
			if err != nil {
				res.fail(fmt.Errorf("relay: produce abandoned ids %d-%d: %w", a.From, a.To, err))
			}
		})
	}
	posRec := positionRecord(r.cfg.OffsetsTopic, r.cfg.TransactionalID, b.pos)
	txn.Produce(ctx, posRec, func(_ *kgo.Record, err error) {
		if err != nil {
			res.fail(fmt.Errorf("relay: produce position: %w", err))
		}
	})
	commitStart := r.cfg.Now()
	if err := r.flushBatch(ctx, txn.Client, &res); err != nil {
		r.abort(txn.Client)
		return err
	}
	if err := r.endBatch(ctx, txn, b); err != nil {
		return err
	}
	r.committed(b, noted, commitStart)
	return nil
}

// produced collects what the produce callbacks of one batch report.
type produced struct {
	mu       sync.Mutex
	firstErr error
	suspects []uint64 // rows of produce batches the broker refused
}

func (p *produced) fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.firstErr == nil {
		p.firstErr = err
	}
}

// produceRows produces b's rows in id order, each to its route or the DLQ,
// and returns the rows dead-lettered or re-stamped. A row suspected of a
// refused produce batch is produced alone and waited for: refused again,
// it gets the relay's time (INVALID_TIMESTAMP) or goes to the DLQ in the
// next attempt. The error is a failed flush; produce failures go to res.
func (r *Relay) produceRows(ctx context.Context, txn *kgo.Client, b *batch, res *produced) (noted []notedRow, err error) {
	now := time.Now() // brokers judge timestamps by their wall clock; cfg.Now is the gap and lag clock
	for i := range b.rows {
		row := &b.rows[i]
		rf := r.refusal(row.ID)
		rec, reason := r.router.Record(row, rf.dlq)
		var restamp RestampReason
		rec.Timestamp, restamp = Stamp(row, now, rf.restamp)
		if reason != "" || restamp != "" {
			noted = append(noted, notedRow{row, reason, restamp})
		}
		id := row.ID
		if rf.suspect {
			// Isolate the suspect in a produce batch of its own, keeping
			// id order: flush what is before it, then wait for it alone.
			if err := txn.Flush(ctx); err != nil {
				return nil, fmt.Errorf("relay: flush: %w", err)
			}
			err := txn.ProduceSync(ctx, rec).FirstErr()
			r.settle(id, reason, err)
			if err != nil {
				res.fail(fmt.Errorf("relay: produce outbox id %d: %w", id, err))
				break
			}
			continue
		}
		txn.Produce(ctx, rec, func(_ *kgo.Record, err error) {
			if err == nil {
				return
			}
			res.fail(fmt.Errorf("relay: produce outbox id %d: %w", id, err))
			if refused(err) {
				res.mu.Lock()
				res.suspects = append(res.suspects, id)
				res.mu.Unlock()
			}
		})
	}
	return noted, nil
}

// flushBatch waits for every produce of the batch and returns the first
// failure, marking the rows of refused produce batches as suspects for the
// next attempt.
func (r *Relay) flushBatch(ctx context.Context, txn *kgo.Client, res *produced) error {
	if err := txn.Flush(ctx); err != nil {
		return fmt.Errorf("relay: flush: %w", err)
	}
	res.mu.Lock()
	defer res.mu.Unlock()
	if len(res.suspects) > 0 {
		r.refusedMu.Lock()
		for _, id := range res.suspects {
			rf := r.refusals[id]
			rf.suspect = true
			r.refusals[id] = rf
		}
		r.refusedMu.Unlock()
	}
	return res.firstErr
}

// endBatch is the commit point: once the batch is flushed and ctx still
// runs, it commits and finishes the commit even if ctx ends meanwhile,
// within ShutdownTimeout. On error the transaction is aborted.
func (r *Relay) endBatch(ctx context.Context, txn producer, b *batch) error {
	if r.cfg.Hooks.BeforeCommit != nil {
		r.cfg.Hooks.BeforeCommit(ctx, b.info)
	}
	if err := ctx.Err(); err != nil {
		r.abort(txn.Client)
		return err
	}
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.ShutdownTimeout)
	err := txn.commit(ectx)
	cancel()
	if r.cfg.Hooks.AfterCommit != nil {
		r.cfg.Hooks.AfterCommit(b.info, err)
	}
	if errors.Is(err, errSilentAbort) {
		r.m.batches.WithLabelValues("aborted").Inc()
		return err
	}
	if err != nil {
		r.abort(txn.Client)
		return fmt.Errorf("relay: commit: %w", err)
	}
	return nil
}

// committed records a committed batch: metrics, logs of its abandoned
// gaps and of its dead-lettered and re-stamped rows, and the end of its
// rows' refusal bookkeeping.
func (r *Relay) committed(b *batch, noted []notedRow, commitStart time.Time) {
	now := r.cfg.Now()
	r.m.commitDuration.Observe(now.Sub(commitStart).Seconds())
	r.m.batchDuration.Observe(now.Sub(b.started).Seconds())
	r.m.batches.WithLabelValues("committed").Inc()
	r.m.openGaps.Set(float64(b.info.OpenGaps))
	for _, a := range b.abandoned {
		r.m.gapsAbandoned.WithLabelValues(string(a.Reason)).Add(float64(a.Count()))
		r.log.Warn("outbox gap abandoned", "from_id", a.From, "to_id", a.To, "count", a.Count(),
			"reason", string(a.Reason), "open_for", a.OpenFor.String())
	}
	dead, restamped := 0, 0
	var first notedRow
	for _, n := range noted {
		if n.restamp != "" {
			r.m.restamped.WithLabelValues(string(n.restamp)).Inc()
			if restamped++; restamped == 1 {
				first = n
			}
		}
		if n.dlq != "" {
			dead++
			r.log.Warn("outbox row dead-lettered", "outbox_id", n.row.ID, "event_id", n.row.EventID,
				"event_type", n.row.EventType, "room_id", n.row.RoomID, "reason", string(n.dlq), "payload_bytes", n.row.size())
		}
	}
	if restamped > 0 {
		// One line a batch: a host whose clock runs fast stamps every row.
		r.log.Warn("outbox rows stamped with the relay's time, their occurred_at_ms no timestamp a broker takes", "rows", restamped,
			"outbox_id", first.row.ID, "event_id", first.row.EventID, "occurred_at_ms", first.row.OccurredAtMs, "reason", string(first.restamp))
	}
	r.m.events.WithLabelValues("relayed").Add(float64(len(b.rows) - dead))
	r.m.events.WithLabelValues("dead_lettered").Add(float64(dead))
	r.forget(b)
	r.log.Debug("batch committed", "rows", len(b.rows), "dead_lettered", dead, "first_id", b.info.FirstID,
		"last_id", b.info.LastID, "high", b.info.High, "open_gaps", b.info.OpenGaps,
		"duration", now.Sub(b.started).String())
}

// forget drops the refusal bookkeeping of a committed batch's rows.
func (r *Relay) forget(b *batch) {
	r.refusedMu.Lock()
	defer r.refusedMu.Unlock()
	if len(r.refusals) == 0 {
		return
	}
	for i := range b.rows {
		delete(r.refusals, b.rows[i].ID)
	}
}

// abort ends the open transaction with an abort, best effort, within
// ShutdownTimeout. Whatever it cannot settle, the next leader's
// InitProducerID does.
func (r *Relay) abort(txn *kgo.Client) {
	r.m.batches.WithLabelValues("aborted").Inc()
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.ShutdownTimeout)
	defer cancel()
	_ = txn.AbortBufferedRecords(ctx)
	_ = txn.EndTransaction(ctx, kgo.TryAbort)
}
