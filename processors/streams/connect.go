package streams

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/kafkax"
)

// start creates the group transact session (read_committed, never
// resetting offsets, the group's callbacks queued for the loop) and hands
// its client to the parts; it does not wait for the group.
func (r *Runtime) start() error {
	opts := r.cfg.clientOpts(
		kgo.ConsumerGroup(r.cfg.Group),
		kgo.ConsumeTopics(r.cfg.Input),
		kgo.TransactionalID(r.cfg.TransactionalID),
		kgo.TransactionTimeout(r.cfg.TransactionTimeout),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Transaction markers advance the consume position, so a
		// caught-up task reaches the last stable offset (punctuate).
		kgo.KeepControlRecords(),
		kgo.RequireStableFetchOffsets(),
		kgo.DisableAutoCommit(),
		// A new group starts at the beginning, and a consumer that has read
		// never jumps: kgo's reset policy would restart a partition from its
		// first offset inside the open transaction when a new leader knows
		// no end for the epoch it read in (unclean election), and state
		// whose duplicate memory is bounded would count old input again.
		// A real OFFSET_OUT_OF_RANGE stops the partition with an error.
		kgo.ConsumeResetOffset(kgo.NoResetOffset().AtStart()),
		kgo.RecordPartitioner(partitioner{changelog: r.cfg.Changelog, def: kgo.StickyKeyPartitioner(nil)}),
		kafkax.BatchBytes(MaxRecordBytes),
	)
	r.watch = r.cfg.Kafka.NewCommitWatch(r.cfg.clientName())
	opts = append(opts, r.watch.Opt())
	opts = append(opts, r.group.hooks()...)
	if r.cfg.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(r.cfg.InstanceID))
	}
	sess, err := kgo.NewGroupTransactSession(opts...)
	if err != nil {
		return fmt.Errorf("runtime %s: client: %w", r.name, err)
	}
	r.sess = sess
	r.adm = kadm.NewClient(sess.Client())
	r.restorer.connect(sess.Client())
	close(r.sessReady)
	if r.killed.Load() {
		return ErrKilled
	}
	return nil
}

// closeSession closes the client (unless Kill did) and drops every task.
func (r *Runtime) closeSession() {
	r.sessCloser.Do(func() {
		if r.killed.Load() {
			return // Kill closes it
		}
		r.closeClient()
	})
	for _, p := range r.group.partitions() {
		r.dropTask(p)
	}
}

// checkTopics verifies that the changelog is co-partitioned with the input.
func (r *Runtime) checkTopics(ctx context.Context) error {
	if r.cfg.Changelog == "" {
		return nil
	}
	for {
		td, err := r.adm.ListTopics(ctx, r.cfg.Input, r.cfg.Changelog)
		if err == nil {
			in, okIn := td[r.cfg.Input]
			cl, okCl := td[r.cfg.Changelog]
			if okIn && okCl && in.Err == nil && cl.Err == nil {
				if len(cl.Partitions) < len(in.Partitions) {
					return fmt.Errorf("runtime %s: changelog %s has %d partitions, input %s has %d: must be co-partitioned",
						r.name, r.cfg.Changelog, len(cl.Partitions), r.cfg.Input, len(in.Partitions))
				}
				return nil
			}
			err = fmt.Errorf("topics %s or %s missing", r.cfg.Input, r.cfg.Changelog)
		}
		if r.killed.Load() {
			return ErrKilled
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.log.Warn("checking topics", "error", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(retryJitter.Jitter(time.Second)):
		}
	}
}

// closeBound is what is left of ShutdownTimeout for closing the client
// once shutdown began (the whole of it after a fatal error).
func (r *Runtime) closeBound() time.Duration {
	if r.stopBy.IsZero() {
		return r.cfg.ShutdownTimeout
	}
	return time.Until(r.stopBy)
}

// closeClient closes the session's client within closeBound: leaving the
// group may wait for a JoinGroup answer far longer (kafkax.CloseWithin).
func (r *Runtime) closeClient() {
	ctx, cancel := context.WithTimeout(context.Background(), r.closeBound())
	defer cancel()
	kafkax.CloseWithin(ctx, r.sess.Client(), r.log)
}

// lagLoop publishes the group's lag for the input partitions this
// instance owns: every second until it has published some (so a fresh
// instance reports its lag at once), then every LagInterval.
func (r *Runtime) lagLoop(ctx context.Context) {
	published := false
	for {
		wait := r.cfg.LagInterval
		if !published {
			wait = min(wait, time.Second)
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		lags, err := r.adm.Lag(ctx, r.cfg.Group)
		if err != nil {
			if ctx.Err() == nil {
				r.log.Debug("lag", "error", err)
			}
			continue
		}
		gl, ok := lags[r.cfg.Group]
		if !ok || gl.Error() != nil {
			continue
		}
		owned := map[int32]bool{}
		for _, p := range r.Assigned() {
			owned[p] = true
		}
		for p, ml := range gl.Lag[r.cfg.Input] {
			// Each member exports the partitions it owns, so replicas
			// never report the same partition twice.
			part := strconv.FormatInt(int64(p), 10)
			switch {
			case !owned[p]:
				r.m.deleteLag(r.name, r.cfg.Input, part)
			case ml.Lag >= 0:
				r.m.setLag(r.name, r.cfg.Input, part, float64(ml.Lag))
				published = true
			}
		}
	}
}

// partitioner sends changelog records to the partition the runtime set
// (co-partitioning) and hashes every other keyed record like the Java
// client (murmur2), so equal keys always land on the same partition.
type partitioner struct {
	changelog string
	def       kgo.Partitioner
}

func (p partitioner) ForTopic(topic string) kgo.TopicPartitioner {
	if topic != "" && topic == p.changelog {
		return kgo.ManualPartitioner().ForTopic(topic)
	}
	return p.def.ForTopic(topic)
}
