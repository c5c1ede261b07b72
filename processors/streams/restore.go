package streams

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
)

// markerKey is the changelog key of restore markers. It is reserved: the
// store refuses it (Put and Delete panic) and a restore skips every record
// with it, whoever wrote it. One key per partition, so compaction keeps
// only the latest marker.
const markerKey = "\x00roomflow.restore-marker"

// restoreReportEvery is how often a restore that waits for its markers
// logs what it waits for.
const restoreReportEvery = 10 * time.Second

// restorer restores the state of newly assigned partitions from their
// changelog (Kafka Streams' StoreChangelogReader). It writes a marker to
// each changelog partition in a transaction of its own on the session's
// producer, then reads the partitions with a short-lived client of its own
// until it has read past its markers. It counts the partitions being
// restored, which Ready reports.
type restorer struct {
	sh *shared
	// opts connect a changelog reader like the session client, but
	// without its hooks (metrics plugins register per client).
	opts      []kgo.Opt
	restoring atomic.Int32 // partitions whose restore has not finished
}

func (rs *restorer) init(sh *shared) { rs.sh = sh }

// connect takes the connection of the session's client cl for the
// changelog readers.
func (rs *restorer) connect(cl *kgo.Client) { rs.opts = restoreOpts(cl) }

// pending is the number of partitions being restored.
func (rs *restorer) pending() int32 { return rs.restoring.Load() }

// restore builds the tasks of parts (newTask) and starts each (start) once
// its store holds the changelog. It commits a marker record to each of
// their changelog partitions in a transaction of its own, then reads the
// partitions read_committed from their start until it has read past its
// markers. A read_committed fetch stops below any open transaction, so the
// restore also waits until every transaction a previous owner left open is
// committed or aborted: what it restores is everything committed to the
// changelog before the marker, however long the fetches stall (a leader
// move, an unreachable broker). There is no time limit; Ready reports not
// ready meanwhile (the caller counts parts in setRestoring).
//
// The marker needs the session's producer: no transaction may be open.
// Errors: a *TxnError if the marker transaction fails (fenced), a
// *RestoreError if the changelog cannot be read, ErrKilled after Kill,
// ctx.Err() on cancel.
func (rs *restorer) restore(ctx context.Context, parts []int32, newTask func(int32) *task, start func(*task)) error {
	began := time.Now()
	markers, err := rs.writeMarkers(ctx, parts)
	if err != nil {
		return err
	}
	tasks := map[int32]*task{}
	for _, p := range parts {
		tasks[p] = newTask(p)
	}
	if err := rs.readChangelog(ctx, tasks, markers); err != nil {
		return err
	}
	took := time.Since(began)
	for _, p := range parts {
		t := tasks[p]
		start(t)
		rs.sh.m.restoreDur.WithLabelValues(rs.sh.name).Observe(took.Seconds())
		rs.sh.log.Info("partition restored", "partition", p, "keys", t.store.Len(), "bytes", t.store.Bytes(),
			"marker_offset", markers[p], "duration", took.String())
	}
	return nil
}

// setRestoring publishes how many partitions are being restored (Ready and
// the restoring gauge).
func (rs *restorer) setRestoring(n int) {
	rs.restoring.Store(int32(n))
	rs.sh.m.restoring.WithLabelValues(rs.sh.name).Set(float64(n))
}

// writeMarkers commits one marker record to the changelog partition of
// each of parts and returns their offsets. A transaction whose produce
// fails is aborted and retried after a back-off.
func (rs *restorer) writeMarkers(ctx context.Context, parts []int32) (map[int32]int64, error) {
	backoff := rs.sh.cfg.RetryBackoffMin
	for {
		offsets, err := rs.markerTxn(parts)
		if err != nil || offsets != nil {
			return offsets, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(retryJitter.Jitter(backoff)):
		}
		if rs.sh.killed.Load() {
			return nil, ErrKilled
		}
		backoff = min(backoff*2, rs.sh.cfg.RetryBackoffMax)
	}
}

// markerTxn runs one marker transaction: the offsets if it committed, nil
// if it aborted. It ends the transaction on the session's client directly:
// it carries no offsets, so committing it is safe whatever the group does,
// and GroupTransactSession.End would hold every offset-less commit for
// 500 ms (its guard for brokers without KIP-447). A rebalance during it
// stays flagged in the session and aborts the next processing
// transaction. Like the end of a processing transaction it is bounded by the transaction timeout, not
// by Run's context (an interrupted end leaves the producer unusable).
func (rs *restorer) markerTxn(parts []int32) (map[int32]int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), rs.sh.cfg.TransactionTimeout)
	defer cancel()
	cl := rs.sh.client()
	fatal := func(err error) error {
		if rs.sh.killed.Load() {
			return ErrKilled
		}
		return &TxnError{Processor: rs.sh.name, Err: fmt.Errorf("restore marker: %w", err)}
	}
	rs.sh.watch.Reset()
	if err := cl.BeginTransaction(); err != nil {
		return nil, fatal(err)
	}
	value := markerValue(rs.sh.cfg.TransactionalID)
	recs := make([]*kgo.Record, len(parts))
	for i, p := range parts {
		recs[i] = &kgo.Record{Topic: rs.sh.cfg.Changelog, Partition: p, Key: []byte(markerKey), Value: value}
	}
	res := cl.ProduceSync(ctx, recs...)
	if err := res.FirstErr(); err != nil {
		if !rs.sh.killed.Load() {
			rs.sh.log.Warn("restore marker not written; aborting its transaction", "topic", rs.sh.cfg.Changelog, "error", err)
		}
		if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
			return nil, fatal(err)
		}
		return nil, nil
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return nil, fatal(err)
	}
	if rs.sh.watch.Aborted() {
		rs.sh.log.Warn("franz-go ended the restore marker's commit as an abort; writing it again", "topic", rs.sh.cfg.Changelog)
		return nil, nil
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
func (rs *restorer) readChangelog(ctx context.Context, tasks map[int32]*task, markers map[int32]int64) error {
	consume := map[int32]kgo.Offset{}
	for p := range markers {
		consume[p] = kgo.NewOffset().AtStart()
	}
	opts := append([]kgo.Opt{}, rs.opts...)
	opts = append(opts,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{rs.sh.cfg.Changelog: consume}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), // the marker's commit marker also ends a partition
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return &RestoreError{Topic: rs.sh.cfg.Changelog, Partition: -1, Err: err}
	}
	defer cl.Close()
	nowMs := rs.sh.cfg.Now().UnixMilli()
	pending := maps.Clone(markers)
	restoreRecs := rs.sh.m.restoreRecs.WithLabelValues(rs.sh.name)
	start := time.Now()
	nextReport := start.Add(restoreReportEvery)
	for len(pending) > 0 {
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fs := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if rs.sh.killed.Load() {
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
				rs.setRestoring(len(pending))
			}
		})
		restoreRecs.Add(float64(n))
		if ferr != nil {
			return ferr
		}
		if len(pending) > 0 && time.Now().After(nextReport) {
			nextReport = time.Now().Add(restoreReportEvery)
			rs.logRestoreWait(ctx, pending, time.Since(start))
		}
	}
	return nil
}

// logRestoreWait says why a restore has not reached its markers yet: an
// open transaction holds a partition's last stable offset at or below the
// marker (a previous owner's; the broker aborts it after that owner's
// transaction timeout), or the fetches stall (no leader, broker down). It
// warns once the wait exceeds the transaction timeout.
func (rs *restorer) logRestoreWait(ctx context.Context, pending map[int32]int64, waited time.Duration) {
	var openTxn, stalled []int32
	lso, err := rs.sh.adm.ListCommittedOffsets(ctx, rs.sh.cfg.Changelog)
	for p, marker := range pending {
		if o, ok := lso.Lookup(rs.sh.cfg.Changelog, p); err == nil && ok && o.Err == nil && o.Offset <= marker {
			openTxn = append(openTxn, p)
		} else {
			stalled = append(stalled, p)
		}
	}
	slices.Sort(openTxn)
	slices.Sort(stalled)
	level := slog.LevelInfo
	if waited > rs.sh.cfg.TransactionTimeout {
		level = slog.LevelWarn
	}
	attrs := []any{"topic", rs.sh.cfg.Changelog, "waited", waited.Round(time.Millisecond).String(),
		"waiting_for_open_transaction", openTxn, "fetch_stalled", stalled}
	if err != nil {
		attrs = append(attrs, "list_offsets_error", err)
	}
	rs.sh.log.Log(ctx, level, "restore waiting to read its marker back; not ready", attrs...)
}

// restoreOpts copies the connection options of cl (brokers, client id,
// TLS, SASL, dialer, logger) for a short-lived changelog reader. Hooks are
// left out on purpose: a metrics hook such as kprom registers collectors
// per client and would collide with the session client's.
func restoreOpts(cl *kgo.Client) []kgo.Opt {
	var o []kgo.Opt
	if v, ok := cl.OptValue(kgo.SeedBrokers).([]string); ok {
		o = append(o, kgo.SeedBrokers(v...))
	}
	if v, ok := cl.OptValue(kgo.ClientID).(string); ok && v != "" {
		o = append(o, kgo.ClientID(v+"-restore"))
	}
	// kgo reports a dialer even when none was set (its default, TLS
	// included) and refuses one beside a TLS config: copy one of the two.
	if v, ok := cl.OptValue(kgo.DialTLSConfig).(*tls.Config); ok && v != nil {
		o = append(o, kgo.DialTLSConfig(v))
	} else if v, ok := cl.OptValue(kgo.Dialer).(func(context.Context, string, string) (net.Conn, error)); ok && v != nil {
		o = append(o, kgo.Dialer(v))
	}
	if v, ok := cl.OptValue(kgo.SASL).([]sasl.Mechanism); ok && len(v) > 0 {
		o = append(o, kgo.SASL(v...))
	}
	if v, ok := cl.OptValue(kgo.WithLogger).(kgo.Logger); ok && v != nil {
		o = append(o, kgo.WithLogger(v))
	}
	return o
}
