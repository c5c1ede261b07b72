package streams

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// markerKey is the changelog key of restore markers. It is reserved: the
// store refuses it (Put and Delete panic) and a restore skips every record
// with it, whoever wrote it. One key per partition, so compaction keeps
// only the latest marker.
const markerKey = "\x00roomflow.restore-marker"

// restoreReportEvery is how often a restore that waits for its markers
// logs what it waits for.
const restoreReportEvery = 10 * time.Second

// restore builds the tasks of newly assigned partitions. With a changelog it
// commits a marker record to each of their changelog partitions in a
// transaction of its own, then reads the partitions read_committed from
// their start until it has read past its markers. A read_committed fetch
// stops below any open transaction, so the restore also waits until every
// transaction a previous owner left open is committed or aborted: what it
// restores is everything committed to the changelog before the marker,
// however long the fetches stall (a leader move, an unreachable broker).
// There is no time limit; Ready reports not ready meanwhile.
//
// The marker needs the session's producer, so an open transaction is
// aborted first (committing it would also commit the offsets of records
// polled but not processed yet); restore reports whether it did, so the
// caller drops what it fetched. Errors: a *TxnError if the marker
// transaction fails (fenced), a *RestoreError if the changelog cannot be
// read, ErrKilled after Kill, ctx.Err() on cancel.
func (r *Runtime) restore(ctx context.Context, parts []int32) (aborted bool, err error) {
	if r.cfg.Changelog == "" {
		for _, p := range parts {
			r.startTask(r.newTask(p))
		}
		return false, nil
	}
	r.setRestoring(len(parts))
	defer r.setRestoring(0)
	if r.inTxn {
		if _, err := r.endTxn(r.cfg.TransactionTimeout, false, "restore"); err != nil {
			return true, err
		}
		aborted = true
	}
	start := time.Now()
	markers, err := r.writeMarkers(ctx, parts)
	if err != nil {
		return aborted, err
	}
	tasks := map[int32]*task{}
	for _, p := range parts {
		tasks[p] = r.newTask(p)
	}
	if err := r.readChangelog(ctx, tasks, markers); err != nil {
		return aborted, err
	}
	took := time.Since(start)
	for _, p := range parts {
		t := tasks[p]
		t.restored = took
		r.startTask(t)
		r.m.restoreDur.WithLabelValues(r.name).Observe(took.Seconds())
		r.log.Info("partition restored", "partition", p, "keys", t.store.Len(), "bytes", t.store.Bytes(),
			"marker_offset", markers[p], "duration", took.String())
	}
	return aborted, nil
}

// setRestoring publishes how many partitions are being restored (Ready and
// the restoring gauge).
func (r *Runtime) setRestoring(n int) {
	r.restoring.Store(int32(n))
	r.m.restoring.WithLabelValues(r.name).Set(float64(n))
}

// writeMarkers commits one marker record to the changelog partition of
// each of parts and returns their offsets. A transaction whose produce
// fails is aborted and retried after a back-off.
func (r *Runtime) writeMarkers(ctx context.Context, parts []int32) (map[int32]int64, error) {
	backoff := r.cfg.RetryBackoffMin
	for {
		offsets, err := r.markerTxn(parts)
		if err != nil || offsets != nil {
			return offsets, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(retryJitter.Jitter(backoff)):
		}
		if r.killed.Load() {
			return nil, ErrKilled
		}
		backoff = min(backoff*2, r.cfg.RetryBackoffMax)
	}
}

// markerTxn runs one marker transaction: the offsets if it committed, nil
// if it aborted. It ends the transaction on the session's client directly:
// it carries no offsets, so committing it is safe whatever the group does,
// and GroupTransactSession.End would hold every offset-less commit for
// 500 ms (its guard for brokers without KIP-447). A rebalance during it
// stays flagged in the session and aborts the next processing
// transaction. Like endTxn it is bounded by the transaction timeout, not
// by Run's context (an interrupted end leaves the producer unusable).
func (r *Runtime) markerTxn(parts []int32) (map[int32]int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.TransactionTimeout)
	defer cancel()
	cl := r.sess.Client()
	fatal := func(err error) error {
		if r.killed.Load() {
			return ErrKilled
		}
		return &TxnError{Processor: r.name, Err: fmt.Errorf("restore marker: %w", err)}
	}
	if err := cl.BeginTransaction(); err != nil {
		return nil, fatal(err)
	}
	value := markerValue(r.cfg.TransactionalID)
	recs := make([]*kgo.Record, len(parts))
	for i, p := range parts {
		recs[i] = &kgo.Record{Topic: r.cfg.Changelog, Partition: p, Key: []byte(markerKey), Value: value}
	}
	res := cl.ProduceSync(ctx, recs...)
	if err := res.FirstErr(); err != nil {
		if !r.killed.Load() {
			r.log.Warn("restore marker not written; aborting its transaction", "topic", r.cfg.Changelog, "error", err)
		}
		if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
			return nil, fatal(err)
		}
		return nil, nil
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return nil, fatal(err)
	}
	offsets := make(map[int32]int64, len(parts))
	for _, pr := range res {
		offsets[pr.Record.Partition] = pr.Record.Offset
	}
	return offsets, nil
}

// markerValue is a marker's changelog value: txnID, for operators, in a
// value that expired long ago, so a runtime from before the markers (after
// a rollback) restores it as nothing.
func markerValue(txnID string) []byte {
	return encodeChangelogValue(entry{value: []byte(txnID), expiresMs: 1})
}

// readChangelog reads each task's changelog partition read_committed from
// its start into the task's store until it has read a record at or after
// the partition's marker offset (the marker itself, or a later record if
// compaction removed it).
func (r *Runtime) readChangelog(ctx context.Context, tasks map[int32]*task, markers map[int32]int64) error {
	consume := map[int32]kgo.Offset{}
	for p := range markers {
		consume[p] = kgo.NewOffset().AtStart()
	}
	opts := append([]kgo.Opt{}, r.restoreOpts...)
	opts = append(opts,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{r.cfg.Changelog: consume}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), // the marker's commit marker also ends a partition
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return &RestoreError{Topic: r.cfg.Changelog, Partition: -1, Err: err}
	}
	defer cl.Close()
	nowMs := r.cfg.Now().UnixMilli()
	pending := maps.Clone(markers)
	restoreRecs := r.m.restoreRecs.WithLabelValues(r.name)
	start := time.Now()
	nextReport := start.Add(restoreReportEvery)
	for len(pending) > 0 {
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fs := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if r.killed.Load() {
			return ErrKilled
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				ferr = &RestoreError{Topic: t, Partition: p, Err: err}
			}
		})
		if ferr != nil {
			return ferr
		}
		n := 0
		fs.EachRecord(func(rec *kgo.Record) {
			marker, ok := pending[rec.Partition]
			if !ok || ferr != nil {
				return
			}
			if !rec.Attrs.IsControl() && string(rec.Key) != markerKey {
				n++
				if err := tasks[rec.Partition].store.restoreRecord(rec.Key, rec.Value, nowMs); err != nil {
					ferr = &RestoreError{Topic: rec.Topic, Partition: rec.Partition, Err: fmt.Errorf("offset %d: %w", rec.Offset, err)}
				}
			}
			if rec.Offset >= marker {
				delete(pending, rec.Partition)
				r.setRestoring(len(pending))
			}
		})
		restoreRecs.Add(float64(n))
		if ferr != nil {
			return ferr
		}
		if len(pending) > 0 && time.Now().After(nextReport) {
			nextReport = time.Now().Add(restoreReportEvery)
			r.logRestoreWait(ctx, pending, time.Since(start))
		}
	}
	return nil
}

// logRestoreWait says why a restore has not reached its markers yet: an
// open transaction holds a partition's last stable offset at or below the
// marker (a previous owner's; the broker aborts it after that owner's
// transaction timeout), or the fetches stall (no leader, broker down). It
// warns once the wait exceeds the transaction timeout.
func (r *Runtime) logRestoreWait(ctx context.Context, pending map[int32]int64, waited time.Duration) {
	var openTxn, stalled []int32
	lso, err := r.adm.ListCommittedOffsets(ctx, r.cfg.Changelog)
	for p, marker := range pending {
		if o, ok := lso.Lookup(r.cfg.Changelog, p); err == nil && ok && o.Err == nil && o.Offset <= marker {
			openTxn = append(openTxn, p)
		} else {
			stalled = append(stalled, p)
		}
	}
	slices.Sort(openTxn)
	slices.Sort(stalled)
	level := slog.LevelInfo
	if waited > r.cfg.TransactionTimeout {
		level = slog.LevelWarn
	}
	attrs := []any{"topic", r.cfg.Changelog, "waited", waited.Round(time.Millisecond).String(),
		"waiting_for_open_transaction", openTxn, "fetch_stalled", stalled}
	if err != nil {
		attrs = append(attrs, "list_offsets_error", err)
	}
	r.log.Log(ctx, level, "restore waiting to read its marker back; not ready", attrs...)
}
