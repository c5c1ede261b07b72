package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/processors/streams"
)

// replay holds the records one mic run wrote (every output topic and the
// changelog), so the rawo run writes exactly those bytes again: the same
// count, sizes, keys, headers and content, hence the same compression work
// and wire volume as mic's output, without the mic's processing.
//
// The records live in an anonymous mapping outside the Go heap: held in the
// heap, hundreds of MB would stretch the GC's pacing and make rawo cheaper
// than any processor of the same output.
type replay struct {
	topics []replayTopic
}

// replayTopic is one mic output topic's records, written to its own copy
// (batches and compression stay per topic, as in the mic run).
type replayTopic struct {
	to    string  // the topic rawo writes
	data  []byte  // encoded records (appendReplayRecord), in the mapping
	off   int     // next record in data
	ratio float64 // records per input event
	acc   float64
}

// appendReplayRecord encodes r: key, value (length+1, 0 for nil: a
// tombstone), headers.
func appendReplayRecord(b []byte, r *kgo.Record) []byte {
	b = binary.AppendUvarint(b, uint64(len(r.Key)))
	b = append(b, r.Key...)
	vl := uint64(0)
	if r.Value != nil {
		vl = uint64(len(r.Value)) + 1
	}
	b = binary.AppendUvarint(b, vl)
	b = append(b, r.Value...)
	b = binary.AppendUvarint(b, uint64(len(r.Headers)))
	for _, h := range r.Headers {
		b = binary.AppendUvarint(b, uint64(len(h.Key)))
		b = append(b, h.Key...)
		b = binary.AppendUvarint(b, uint64(len(h.Value)))
		b = append(b, h.Value...)
	}
	return b
}

// captureReplay reads the committed records of topics (want[i] of
// topics[i], as counted by the mic run) into a replay writing each to
// topics[i]+".rawo", created here; inputs is the run's input event count.
func captureReplay(ctx context.Context, cfg *config.Config, topics []string, want []int, inputs int) (*replay, error) {
	cl, err := cfg.Kafka.Cluster(nil, nil).NewClient("bench-replay", kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	index := map[string]int{}
	for i, tp := range topics {
		index[tp] = i
	}
	enc := make([][]byte, len(topics))
	got := make([]int, len(topics))
	done := func() bool {
		for i := range topics {
			if got[i] < want[i] {
				return false
			}
		}
		return true
	}
	for !done() {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		fs := cl.PollFetches(pctx)
		stalled := pctx.Err() != nil
		cancel()
		if stalled {
			return nil, fmt.Errorf("replay capture: %d of %d records after 10 s without progress", got, want)
		}
		if err := fs.Err(); err != nil {
			return nil, fmt.Errorf("replay capture: %w", err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			i := index[r.Topic]
			enc[i] = appendReplayRecord(enc[i], r)
			got[i]++
		})
	}
	size := 0
	for _, e := range enc {
		size += len(e)
	}
	mem, err := syscall.Mmap(-1, 0, max(size, 1), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("replay capture: mmap %d bytes: %w", size, err)
	}
	rp := &replay{}
	at := 0
	for i, tp := range topics {
		n := copy(mem[at:], enc[i])
		rp.topics = append(rp.topics, replayTopic{to: tp + ".rawo", data: mem[at : at+n : at+n],
			ratio: float64(got[i]) / float64(inputs)})
		at += n
		enc[i] = nil
		if err := createTopic(ctx, cfg, tp+".rawo", tp == cfg.Kafka.Topics.MicStateChangelog); err != nil {
			return nil, err
		}
	}
	return rp, nil
}

// String sums up the captured records: count and encoded bytes per topic.
func (rp *replay) String() string {
	var b strings.Builder
	for i, tp := range rp.topics {
		n := 0
		var r kgo.Record
		for tp.off = 0; tp.off < len(tp.data); n++ {
			tp.next(&r, func(n int) []kgo.RecordHeader { return make([]kgo.RecordHeader, n) })
		}
		tp.off = 0
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d records %.1f MB", tp.to, n, float64(len(tp.data))/1e6)
	}
	return b.String()
}

// rewind starts every topic's replay again (each round replays the same
// records).
func (rp *replay) rewind() {
	for i := range rp.topics {
		rp.topics[i].off, rp.topics[i].acc = 0, 0
	}
}

// emit writes the share of one input event of every topic's records (as
// the mic does, into the transaction's arena: no allocation per record).
func (rp *replay) emit(t streams.Task) {
	for i := range rp.topics {
		tp := &rp.topics[i]
		for tp.acc += tp.ratio; tp.acc >= 1; tp.acc-- {
			if tp.off == len(tp.data) {
				tp.off = 0 // more inputs than the capture's: start over
			}
			r := t.NewRecord()
			tp.next(r, t.NewHeaders)
			t.Emit(r)
		}
	}
}

// next decodes the record at tp.off into r, its headers from headers; its
// key, value and headers alias the mapping, which lives as long as the
// process.
func (tp *replayTopic) next(r *kgo.Record, headers func(n int) []kgo.RecordHeader) {
	b := tp.data[tp.off:]
	field := func() []byte {
		n, w := binary.Uvarint(b)
		v := b[w : w+int(n)]
		b = b[w+int(n):]
		return v
	}
	*r = kgo.Record{Topic: tp.to}
	r.Key = field()
	vl, w := binary.Uvarint(b)
	b = b[w:]
	if vl > 0 {
		r.Value, b = b[:vl-1], b[vl-1:]
	}
	nh, w := binary.Uvarint(b)
	b = b[w:]
	if nh > 0 {
		r.Headers = headers(int(nh))
		for j := range r.Headers {
			k := field()
			r.Headers[j] = kgo.RecordHeader{Key: unsafe.String(unsafe.SliceData(k), len(k)), Value: field()}
		}
	}
	tp.off = len(tp.data) - len(b)
}
