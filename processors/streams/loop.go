package streams

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/schemas/envelope"
)

// loop is the processing loop: apply the group's changes, open a
// transaction, resume the partitions whose backoff has passed, punctuate,
// poll, apply the changes the poll brought, process what it fetched, and
// commit once the transaction is due.
func (r *Runtime) loop(ctx context.Context) error {
	for {
		if r.stopping(ctx) {
			return r.shutdown()
		}
		if _, err := r.handleEvents(ctx); err != nil {
			return r.fail(ctx, err)
		}
		if !r.ready.Load() {
			r.ready.Store(true)
		}
		if err := r.txn.begin(); err != nil {
			return err
		}
		resumeIn := r.stalls.resume()
		r.punct.punctuate()
		fetches := r.txn.poll(ctx, resumeIn)
		if fetches.IsClientClosed() || r.killed.Load() {
			if r.killed.Load() {
				return ErrKilled
			}
			return r.shutdown()
		}
		if err := kafkax.RefusedGroup(r.cfg.Group, fetches); err != nil {
			return r.refuse(ctx, err)
		}
		r.logFetchErrors(fetches)
		// Assignment changes seen after the poll: restore new partitions
		// before processing; a revoke aborts and rewinds, so the fetched
		// records are stale and dropped.
		rewound, err := r.handleEvents(ctx)
		if err != nil {
			return r.fail(ctx, err)
		}
		if !rewound {
			if err := r.process(fetches); err != nil {
				return err
			}
		}
		if err := r.commitIfDue(); err != nil {
			return r.fail(ctx, err)
		}
	}
}

func (r *Runtime) stopping(ctx context.Context) bool { return ctx.Err() != nil || r.killed.Load() }

// fail returns err, or shuts down if the runtime is stopping anyway.
func (r *Runtime) fail(ctx context.Context, err error) error {
	if r.stopping(ctx) {
		return r.shutdown()
	}
	return err
}

// refuse ends Run on a group the broker refuses for good
// (kafkax.GroupRefused): Ready reports it from now on, and the open
// transaction ends as at shutdown.
func (r *Runtime) refuse(ctx context.Context, err error) error {
	r.refused.Store(&err)
	if serr := r.shutdown(); serr != nil || r.stopping(ctx) {
		return serr
	}
	return err
}

func (r *Runtime) logFetchErrors(fetches kgo.Fetches) {
	fetches.EachError(func(t string, p int32, err error) {
		switch {
		case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		case errors.Is(err, kerr.OffsetOutOfRange):
			// The input never resets (see start): the partition stays stopped
			// until an operator moves the group's offset.
			r.log.Error("input partition stopped: its committed position is no longer in the log", "topic", t, "partition", p, "error", err)
		default:
			r.log.Warn("fetch error", "topic", t, "partition", p, "error", err)
		}
	})
}

// process hands the fetched records to their tasks. If the client and the
// tasks disagree on the assignment it rewinds everything to the last
// commit; only an error ending that transaction is returned.
func (r *Runtime) process(fetches kgo.Fetches) error {
	if err := r.processFetches(fetches); err != nil {
		r.log.Error("transaction aborted", "error", err)
		_, err := r.endTxn(r.cfg.TransactionTimeout, false, "unowned_partition")
		return err
	}
	return nil
}

// commitIfDue commits the open transaction once it is due (txn.due).
func (r *Runtime) commitIfDue() error {
	if !r.txn.due() {
		return nil
	}
	_, err := r.endTxn(r.cfg.TransactionTimeout, true, "")
	return err
}

// processFetches hands the polled records to their tasks, in offset order
// per partition. A record failing with a non-reject error stalls its
// partition (stallTracker.record) and the partition's later records are
// left to be fetched again; the other partitions go on.
func (r *Runtime) processFetches(fetches kgo.Fetches) error {
	var err error
	r.txn.newPoll()
	fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		if err != nil || fp.Topic != r.cfg.Input || len(fp.Records) == 0 {
			return
		}
		t := r.group.task(fp.Partition)
		if t == nil {
			err = fmt.Errorf("runtime %s: records of unowned partition %d", r.name, fp.Partition)
			return
		}
		r.processPartition(t, fp.Records)
	})
	return err
}

// processPartition processes recs, polled from t's partition, until one
// stalls it.
func (r *Runtime) processPartition(t *task, recs []*kgo.Record) {
	st := r.stalls.of(t.partition)
	for _, rec := range recs {
		if rec.Attrs.IsControl() {
			continue // a transaction marker: consumed, nothing to process
		}
		if st.fetchPaused() {
			// Polled before the pause took effect: set back, so
			// these records are refetched, not committed.
			r.stalls.setBack(t.partition, rec)
			return
		}
		if perr := r.processRecord(t, rec); perr != nil {
			r.stalls.record(t, rec, perr)
			return
		}
		if st.recoversAt(rec.Offset) {
			r.stalls.recovered(t)
			st = nil
		}
	}
}

// processRecord runs the processor on rec. A reject (or corrupt state)
// sends rec to the DLQ; any other error is returned with rec's writes and
// emits undone, so the open transaction stays committable.
func (r *Runtime) processRecord(t *task, rec *kgo.Record) error {
	r.txn.markContent()
	t.recCtx = r.txn.context()
	emits, err := t.step(func() error { return r.proc.Process(t, rec) })
	t.recCtx = nil
	if err == nil {
		if err = tooLarge(emits); err == nil {
			r.txn.consumed(emits)
			return nil
		}
		clear(emits)
	}
	rej, ok := asDeadLetter(err)
	if !ok {
		return err
	}
	r.txn.deadLetter(rec, rej)
	t.log.Warn("record rejected to the DLQ", "offset", rec.Offset, "reason", rej.Reason, "error", rej.Err,
		"event_id", string(envelope.Header(rec, envelope.HeaderEventID)), "event_type", string(envelope.Header(rec, envelope.HeaderEventType)))
	return nil
}

// tooLarge is the reject of a record whose emits hold one above
// MaxRecordBytes, or nil.
func tooLarge(emits []*kgo.Record) error {
	big := slices.IndexFunc(emits, func(e *kgo.Record) bool { return recordSize(e) > MaxRecordBytes })
	if big < 0 {
		return nil
	}
	return Rejectf(ReasonOutputTooLarge, "output to %s of %d bytes is above %d", emits[big].Topic, recordSize(emits[big]), MaxRecordBytes)
}

// endTxn ends the open transaction: with commit, the tasks' changelogs go
// into it and it commits unless prepareCommit finds a reason to abort. The
// tasks' store writes are applied (committed) or discarded (aborted)
// either way. An error is fatal (*TxnError), except a failed commit kgo
// aborted with the producer still usable (endAborted).
//
// Ending a transaction must not be interrupted half-way (a cancelled End
// leaves the producer unusable), so it does not follow Run's context: it
// is bounded by timeout (the transaction timeout; the shutdown timeout for
// the final one).
func (r *Runtime) endTxn(timeout time.Duration, commit bool, abortCause string) (bool, error) {
	if !r.txn.isOpen() {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if commit {
		r.group.writeChangelogs(&r.txn)
		if cause := r.txn.prepareCommit(ctx, r.group.checkMembership); cause != "" {
			commit, abortCause = false, cause
		}
	}
	committed, abortCause, err := r.txn.end(ctx, commit, abortCause, r.group.eventsPending)
	r.group.settle(committed && err == nil)
	return r.txn.finish(committed, commit, abortCause, err)
}

// shutdown ends the open transaction with a commit attempt bounded by the
// shutdown timeout (GroupTransactSession aborts it instead if that is not
// safe) and returns nil.
func (r *Runtime) shutdown() error {
	if r.killed.Load() {
		return ErrKilled
	}
	r.stopBy = time.Now().Add(r.cfg.ShutdownTimeout)
	if r.txn.isOpen() {
		committed, err := r.endTxn(r.cfg.ShutdownTimeout, r.txn.hasContent(), "shutdown")
		if err != nil {
			r.log.Error("final transaction failed; it is aborted by the broker", "error", err)
			return nil
		}
		r.log.Info("stopped", "final_commit", committed)
	}
	return nil
}

// handleEvents applies assignment changes: a revoke or loss aborts the open
// transaction (rewinding every partition to its committed offset) and drops
// the partitions' tasks; an assignment restores the new tasks (with a
// changelog, that also aborts the open transaction). It reports whether the
// open transaction was aborted.
func (r *Runtime) handleEvents(ctx context.Context) (bool, error) {
	events := r.group.takeEvents()
	if len(events) == 0 {
		return false, nil
	}
	rewound := false
	var assigned []int32
	for _, ev := range events {
		switch ev.kind {
		case evRevoked:
			if r.txn.isOpen() && !rewound {
				if _, err := r.endTxn(r.cfg.TransactionTimeout, false, "rebalance"); err != nil {
					return true, err
				}
				rewound = true
			}
			for _, p := range ev.partitions {
				r.dropTask(p)
			}
			// A partition assigned earlier in this batch and revoked now
			// is not restored.
			assigned = removeAll(assigned, ev.partitions)
		case evAssigned:
			for _, p := range ev.partitions {
				// The group hands over only what this member did not own in
				// the generation before. A task still held for such a
				// partition missed its revoke (kfake handed a restarted
				// static member its partitions again without revoking them
				// from their new owner: chaos seed 856094729), and another
				// owner may have written state since: restore it afresh.
				r.dropTask(p)
				if !slices.Contains(assigned, p) {
					assigned = append(assigned, p)
				}
			}
		}
	}
	if len(assigned) > 0 {
		aborted, err := r.restore(ctx, assigned)
		rewound = rewound || aborted
		if err != nil {
			return rewound, err
		}
	}
	return rewound, nil
}

func removeAll(ps, rm []int32) []int32 {
	out := ps[:0]
	for _, p := range ps {
		keep := true
		for _, q := range rm {
			keep = keep && p != q
		}
		if keep {
			out = append(out, p)
		}
	}
	return out
}

// restore starts the tasks of newly assigned partitions, with a changelog
// once the restorer has rebuilt their stores. The restore's marker needs
// the session's producer, so an open transaction is aborted first
// (committing it would also commit the offsets of records polled but not
// processed yet); restore reports whether it did, so the caller drops what
// it fetched.
func (r *Runtime) restore(ctx context.Context, parts []int32) (aborted bool, err error) {
	if r.cfg.Changelog == "" {
		for _, p := range parts {
			r.startTask(r.newTask(p))
		}
		return false, nil
	}
	r.restorer.setRestoring(len(parts))
	defer r.restorer.setRestoring(0)
	if r.txn.isOpen() {
		if _, err := r.endTxn(r.cfg.TransactionTimeout, false, "restore"); err != nil {
			return true, err
		}
		aborted = true
	}
	return aborted, r.restorer.restore(ctx, parts, r.newTask, r.startTask)
}

func (r *Runtime) newTask(p int32) *task {
	t := &task{
		topic:     r.cfg.Input,
		partition: p,
		log:       r.log.With("topic", r.cfg.Input, "partition", p),
		clock:     r.cfg.Now,
		ctx:       r.shared.ctx,
		arena:     r.txn.memory(),
	}
	if r.cfg.Changelog != "" {
		t.store = newStore(r.cfg.Now)
	}
	return t
}

// startTask hands a new (restored) task to the parts: its timers, its
// ownership and stall gauge, then Assigned.
func (r *Runtime) startTask(t *task) {
	r.punct.add(t)
	r.group.add(t)
	r.stalls.track(t.partition)
	r.group.publish()
}

// dropTask takes partition p's task from the parts, if owned.
func (r *Runtime) dropTask(p int32) {
	if !r.group.remove(p) {
		return
	}
	r.stalls.forget(p)
	r.punct.remove(p)
}
