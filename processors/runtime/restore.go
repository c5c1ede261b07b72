package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// restoreQuiet is how long a restore waits without any changelog record
// before it concludes that the rest of the partition was compacted away.
const restoreQuiet = 10 * time.Second

// restore builds the tasks of newly assigned partitions. With a changelog,
// it first waits until the partitions' committed input offsets are stable
// (the previous owner's last transaction is resolved, KIP-447), then reads
// each changelog partition from its start to its last stable offset.
func (r *Runtime) restore(ctx context.Context, parts []int32) error {
	if r.o.changelog == "" {
		for _, p := range parts {
			r.startTask(r.newTask(p))
		}
		return nil
	}
	start := time.Now()
	if err := r.waitStable(ctx, parts); err != nil {
		return err
	}
	starts, err := r.adm.ListStartOffsets(ctx, r.o.changelog)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return &RestoreError{Topic: r.o.changelog, Partition: parts[0], Err: fmt.Errorf("list start offsets: %w", err)}
	}
	ends, err := r.adm.ListCommittedOffsets(ctx, r.o.changelog) // last stable offsets
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return &RestoreError{Topic: r.o.changelog, Partition: parts[0], Err: fmt.Errorf("list stable offsets: %w", err)}
	}

	tasks := map[int32]*Task{}
	targets := map[int32]int64{} // partitions still to read: last offset to reach
	consume := map[int32]kgo.Offset{}
	for _, p := range parts {
		t := r.newTask(p)
		tasks[p] = t
		so, _ := starts.Lookup(r.o.changelog, p)
		eo, ok := ends.Lookup(r.o.changelog, p)
		if !ok {
			return &RestoreError{Topic: r.o.changelog, Partition: p, Err: errors.New("partition missing")}
		}
		if eo.Offset > so.Offset {
			targets[p] = eo.Offset - 1
			consume[p] = kgo.NewOffset().At(so.Offset)
		}
	}
	var n int
	if len(targets) > 0 {
		n, err = r.readChangelog(ctx, tasks, targets, consume)
		if err != nil {
			return err
		}
	}
	took := time.Since(start)
	for _, p := range parts {
		t := tasks[p]
		t.restored = took
		r.startTask(t)
		r.m.restoreDur.WithLabelValues(r.name).Observe(took.Seconds())
		r.log.Info("partition restored", "partition", p, "keys", t.store.Len(), "bytes", t.store.Bytes(), "duration", took.String())
	}
	r.m.restoreRecs.WithLabelValues(r.name).Add(float64(n))
	return nil
}

func (r *Runtime) readChangelog(ctx context.Context, tasks map[int32]*Task, targets map[int32]int64, consume map[int32]kgo.Offset) (int, error) {
	opts := append([]kgo.Opt{}, r.restoreOpts...)
	opts = append(opts,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{r.o.changelog: consume}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), // the last offset may be a commit marker
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return 0, &RestoreError{Topic: r.o.changelog, Partition: -1, Err: err}
	}
	defer cl.Close()
	nowMs := r.o.clock().UnixMilli()
	n := 0
	lastProgress := time.Now()
	for len(targets) > 0 {
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fs := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return n, ctx.Err()
		}
		if r.killed.Load() {
			return n, ErrKilled
		}
		if fs.NumRecords() > 0 {
			lastProgress = time.Now()
		} else if time.Since(lastProgress) > restoreQuiet {
			// The tail below the last stable offset can be gone
			// (compacted tombstones and transaction markers of an idle
			// partition). A fetch answers as soon as any record is
			// readable, so a long silence means nothing is left.
			r.log.Warn("changelog ends before its last stable offset (compacted tail); restore complete",
				"topic", r.o.changelog, "partitions", len(targets))
			break
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				ferr = &RestoreError{Topic: t, Partition: p, Err: err}
			}
		})
		if ferr != nil {
			return n, ferr
		}
		var rerr error
		fs.EachRecord(func(rec *kgo.Record) {
			target, ok := targets[rec.Partition]
			if !ok || rerr != nil {
				return
			}
			if !rec.Attrs.IsControl() {
				n++
				if err := tasks[rec.Partition].store.restoreRecord(rec.Key, rec.Value, nowMs); err != nil {
					rerr = &RestoreError{Topic: rec.Topic, Partition: rec.Partition, Err: fmt.Errorf("offset %d: %w", rec.Offset, err)}
				}
			}
			if rec.Offset >= target {
				delete(targets, rec.Partition)
			}
		})
		if rerr != nil {
			return n, rerr
		}
	}
	return n, nil
}

// waitStable blocks until no transactional offset commit of the group is
// pending for parts (OffsetFetch with RequireStable).
func (r *Runtime) waitStable(ctx context.Context, parts []int32) error {
	for {
		resps, err := r.adm.FetchOffsetsForTopics(kadm.RequireStable(ctx), r.o.group, r.o.input)
		unstable := false
		if err == nil {
			for _, p := range parts {
				if or, ok := resps.Lookup(r.o.input, p); ok && or.Err != nil {
					if errors.Is(or.Err, kerr.UnstableOffsetCommit) {
						unstable = true
					} else {
						err = or.Err
					}
				}
			}
		} else if errors.Is(err, kerr.UnstableOffsetCommit) {
			unstable, err = true, nil
		}
		if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			r.log.Warn("fetching committed offsets before restore", "error", err)
			unstable = true
		}
		if !unstable {
			return nil
		}
		if r.killed.Load() {
			return ErrKilled
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
