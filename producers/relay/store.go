package relay

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/kafkax"
)

// positionPartition is where every position record lives in the relay
// offsets topic. One partition keeps a relay's position and its probes in a
// single ordered log (see loadPosition); the traffic is one small record per
// transaction, so spreading it would buy nothing.
const positionPartition = 0

// probeSuffix makes the probe key of a relay: name + probeSuffix.
const probeSuffix = "\x00probe"

// partitioner pins the relay offsets topic to positionPartition and leaves
// every other topic to franz-go's default (murmur2 of the key, like the
// Java client, so room_id keys land where other producers put them).
type partitioner struct {
	offsetsTopic string
	def          kgo.Partitioner
	manual       kgo.Partitioner
}

func newPartitioner(offsetsTopic string) kgo.Partitioner {
	return &partitioner{
		offsetsTopic: offsetsTopic,
		def:          kgo.UniformBytesPartitioner(64<<10, true, true, nil),
		manual:       kgo.ManualPartitioner(),
	}
}

func (p *partitioner) ForTopic(topic string) kgo.TopicPartitioner {
	if topic == p.offsetsTopic {
		return p.manual.ForTopic(topic)
	}
	return p.def.ForTopic(topic)
}

// positionRecord is the record that stores an encoded position for relay
// name.
func positionRecord(topic, name string, encoded []byte) *kgo.Record {
	return &kgo.Record{Topic: topic, Partition: positionPartition, Key: []byte(name), Value: encoded}
}

// loadPosition returns the latest committed position of relay name.
//
// Reading "to the end" of a transactional log is subtle: the end offset
// counts aborted records and markers, and an unfinished transaction holds
// the last stable offset back. So the new leader, right after its
// InitProducerID has fenced every older producer of the transactional id
// (which aborts or completes whatever they had open), commits a probe record
// with a fresh nonce to the same partition, then reads that partition with
// read_committed from the start until it sees its own probe. Every position
// committed before the takeover is below the probe, and no one else can
// commit after it, so the last position record before the probe is the
// latest one. found is false when the relay has never committed.
//
// The read may take as long as the partition needs while it progresses;
// when nothing arrives for wait (the transaction timeout), another
// producer's transaction holds the partition or the probe's commit did not
// happen, and the session starts again with a new probe (errProbeUnseen)
// instead of waiting for good. Transaction markers count as progress, so
// a long run of aborted transactions is read through too.
//
// txn must be the fenced-in transactional client; consumerOpts are the base
// options for a short-lived read_committed consumer.
func loadPosition(ctx context.Context, txn producer, consumerOpts []kgo.Opt, topic, name string, wait time.Duration) (pos Position, found bool, err error) {
	nonce := make([]byte, 16)
	_, _ = rand.Read(nonce)
	probeKey := []byte(name + probeSuffix)
	if err := txn.begin(); err != nil {
		return Position{}, false, fmt.Errorf("relay: begin probe transaction: %w", err)
	}
	res := txn.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: positionPartition, Key: probeKey, Value: nonce})
	if perr := res.FirstErr(); perr != nil {
		abortTxn(txn.Client)
		return Position{}, false, fmt.Errorf("relay: produce probe: %w", perr)
	}
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortTimeout)
	err = txn.commit(ectx)
	cancel()
	if errors.Is(err, errSilentAbort) {
		return Position{}, false, err
	}
	if err != nil {
		abortTxn(txn.Client)
		return Position{}, false, fmt.Errorf("relay: commit probe: %w", err)
	}

	cl, err := kgo.NewClient(append(append([]kgo.Opt(nil), consumerOpts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {positionPartition: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	)...)
	if err != nil {
		return Position{}, false, fmt.Errorf("relay: position consumer: %w", err)
	}
	defer cl.Close()
	var last []byte
	for {
		pctx, stop := context.WithTimeout(ctx, wait)
		fs := cl.PollFetches(pctx)
		stop()
		if err := ctx.Err(); err != nil {
			return Position{}, false, err
		}
		if fs.NumRecords() == 0 && pctx.Err() != nil {
			return Position{}, false, fmt.Errorf("%w: nothing read for %s", errProbeUnseen, wait)
		}
		if err := kafkax.FetchErrors(fs, func(t string, p int32, err error) error {
			return fmt.Errorf("relay: read %s/%d: %w", t, p, err)
		}); err != nil {
			return Position{}, false, err
		}
		done := false
		fs.EachRecord(func(r *kgo.Record) {
			switch {
			case done, r.Attrs.IsControl():
			case bytes.Equal(r.Key, probeKey):
				done = bytes.Equal(r.Value, nonce)
			case string(r.Key) == name:
				last = r.Value
			}
		})
		if done {
			break
		}
	}
	return lastPosition(name, last)
}

// errProbeUnseen is a position read that did not reach its probe.
var errProbeUnseen = errors.New("relay: the position probe was not readable (another transaction holds the offsets partition, or the probe did not commit)")

// lastPosition decodes the last position value read for relay name (nil:
// never committed).
func lastPosition(name string, last []byte) (Position, bool, error) {
	if last == nil {
		return Position{}, false, nil
	}
	pos, err := DecodePosition(last)
	if err != nil {
		return Position{}, false, fmt.Errorf("relay: position of %s: %w", name, err)
	}
	return pos, true, nil
}

// abortTxn aborts the open transaction, best effort; the caller closes the
// client on any error anyway, and the next leader's InitProducerID aborts
// whatever is left.
func abortTxn(cl *kgo.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), abortTimeout)
	defer cancel()
	_ = cl.AbortBufferedRecords(ctx)
	_ = cl.EndTransaction(ctx, kgo.TryAbort)
}
