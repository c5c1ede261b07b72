package kafkax

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Offsets are offsets by topic and partition.
type Offsets map[string]map[int32]int64

// set records off for topic t, partition p.
func (o Offsets) set(t string, p int32, off int64) {
	if o[t] == nil {
		o[t] = map[int32]int64{}
	}
	o[t][p] = off
}

// CommittedBounds lists every partition of topics with its log start and
// its committed end: the last stable offset, as far as a read_committed
// consumer can read while a transaction is open. It fails when listing
// fails or a topic does not exist.
func CommittedBounds(ctx context.Context, adm *kadm.Client, topics ...string) (starts, ends Offsets, err error) {
	starts, ends = Offsets{}, Offsets{}
	for _, x := range []struct {
		list func(context.Context, ...string) (kadm.ListedOffsets, error)
		into Offsets
	}{{adm.ListCommittedOffsets, ends}, {adm.ListStartOffsets, starts}} {
		lo, err := x.list(ctx, topics...)
		if err == nil {
			err = lo.Error()
		}
		if err != nil {
			return nil, nil, fmt.Errorf("list offsets of %s: %w", strings.Join(topics, ", "), err)
		}
		lo.Each(func(l kadm.ListedOffset) { x.into.set(l.Topic, l.Partition, l.Offset) })
	}
	for _, t := range topics {
		if len(ends[t]) == 0 {
			return nil, nil, fmt.Errorf("topic %s does not exist", t)
		}
	}
	return starts, ends, nil
}

// ReadCommitted reads topics read_committed from the offsets in from (a
// partition from does not name: its log start) up to the committed end
// each partition had when it was called, and passes every record to fn as
// ReadToEnd does, transaction markers included. newClient makes the
// clients from the options given (add the caller's cluster, client id,
// metrics). idle is as in ReadToEnd.
func ReadCommitted(ctx context.Context, newClient func(...kgo.Opt) (*kgo.Client, error), from Offsets, idle time.Duration, fn func(*kgo.Record) (stop bool, err error), topics ...string) error {
	adm, err := newClient()
	if err != nil {
		return err
	}
	starts, ends, err := CommittedBounds(ctx, kadm.NewClient(adm), topics...)
	adm.Close()
	if err != nil {
		return err
	}
	at, offsets := Offsets{}, map[string]map[int32]kgo.Offset{}
	for t, ps := range starts {
		offsets[t] = map[int32]kgo.Offset{}
		for p, start := range ps {
			if f, ok := from[t][p]; ok && f > start {
				start = f
			}
			at.set(t, p, start)
			offsets[t][p] = kgo.NewOffset().At(start)
		}
	}
	cl, err := newClient(kgo.ConsumePartitions(offsets), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		return err
	}
	defer cl.Close()
	return ReadToEnd(ctx, cl, at, ends, idle, fn)
}

// ReadToEnd polls cl, positioned at from, until every partition of ends
// was read up to its end offset (exclusive; a partition whose from is at or
// past its end is done at once), passing each record before its
// partition's end to fn until fn says stop or fails. cl must fetch
// read_committed with kgo.KeepControlRecords: without the transaction
// markers a partition whose last offsets are a marker never visibly reaches
// its end. fn gets the markers too (r.Attrs.IsControl(); they tell where a
// transaction ended): wrap it in DataRecords to see only the data.
//
// With idle > 0 it returns nil when nothing arrived for idle before the
// end: the records of an aborted transaction take offsets that no fetch
// returns. With a nil ends it follows the topics until ctx ends. It
// returns ctx's error when ctx ends first, and a fetch error as soon as
// one comes.
func ReadToEnd(ctx context.Context, cl *kgo.Client, from, ends Offsets, idle time.Duration, fn func(*kgo.Record) (stop bool, err error)) error {
	follow := ends == nil
	left := map[string]map[int32]int64{}
	for t, ps := range ends {
		for p, end := range ps {
			if from[t][p] < end {
				Offsets(left).set(t, p, end)
			}
		}
	}
	for follow || len(left) > 0 {
		pctx, cancel := ctx, context.CancelFunc(func() {})
		if !follow && idle > 0 {
			pctx, cancel = context.WithTimeout(ctx, idle)
		}
		fs := cl.PollFetches(pctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
		if fs.Empty() && pctx.Err() != nil {
			return nil // idle
		}
		if err := FetchErrors(fs, func(t string, p int32, err error) error { return fmt.Errorf("fetch %s[%d]: %w", t, p, err) }); err != nil {
			return err
		}
		for it := fs.RecordIter(); !it.Done(); {
			r := it.Next()
			end, bounded := ends[r.Topic][r.Partition]
			if _, ok := left[r.Topic][r.Partition]; ok && r.Offset+1 >= end {
				delete(left[r.Topic], r.Partition)
				if len(left[r.Topic]) == 0 {
					delete(left, r.Topic)
				}
			}
			if bounded && r.Offset >= end {
				continue
			}
			if stop, err := fn(r); stop || err != nil {
				return err
			}
		}
	}
	return nil
}

// FetchErrors is the fetch errors of a poll, each wrapped by wrap with its
// topic and partition, joined; nil when there are none. A poll context's
// deadline or cancel is not an error: it is the caller's idle wait or stop
// ending the poll, which the caller checks itself.
func FetchErrors(fs kgo.Fetches, wrap func(topic string, partition int32, err error) error) error {
	var errs error
	fs.EachError(func(t string, p int32, err error) {
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			errs = errors.Join(errs, wrap(t, p, err))
		}
	})
	return errs
}

// DataRecords is fn called for data records only, the transaction markers
// skipped.
func DataRecords(fn func(*kgo.Record) (stop bool, err error)) func(*kgo.Record) (bool, error) {
	return func(r *kgo.Record) (bool, error) {
		if r.Attrs.IsControl() {
			return false, nil
		}
		return fn(r)
	}
}
