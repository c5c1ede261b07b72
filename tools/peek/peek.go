// Package peek prints the records of a roomflow topic as JSON lines, each
// value decoded by the type its topic or event_type header names
// (`roomflow peek`).
package peek

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/schemas/envelope"
	"github.com/hyapp/roomflow/schemas/roomv1"
	"github.com/hyapp/roomflow/schemas/userv1"
)

// Options say which records Run prints: the flags of `roomflow peek`.
type Options struct {
	// Partition limits it to one partition; -1 reads all.
	Partition int32
	// Offset is where each partition begins: start, end, an offset N, or
	// -N for its last N records.
	Offset string
	// Count stops it after that many records; 0 does not.
	Count int
	// Follow keeps printing new records until ctx ends.
	Follow bool
	// Idle, without Follow, stops it when nothing arrived for this long
	// before the end was reached.
	Idle time.Duration
}

// Defaults are the flags' defaults: every partition from its start, no
// count, 5s idle.
var Defaults = Options{Partition: -1, Offset: "start", Idle: 5 * time.Second}

// Run prints the records of topicArg (a topic name or a kafka.topics key)
// to w as JSON lines, decoded by type, read_committed: it resolves the
// topic, computes each partition's start and (without o.Follow) end offset
// in the committed log, and prints until done. It fails on a topic or
// partition that does not exist, a bad o.Offset, or a broker error; an
// interrupt (ctx ending) is a clean stop.
func Run(ctx context.Context, cfg *config.Config, topicArg string, o Options, w io.Writer) error {
	topic := topicArg
	for _, t := range cfg.Kafka.Topics.List() {
		if t.Key == topicArg {
			topic = t.Name
		}
	}
	adm, err := cfg.Kafka.Cluster(nil, nil).NewClient("peek")
	if err != nil {
		return err
	}
	startsOf, endsOf, err := kafkax.CommittedBounds(ctx, kadm.NewClient(adm), topic)
	adm.Close()
	if err != nil {
		return fmt.Errorf("peek: %w", err)
	}
	ends, starts := endsOf[topic], startsOf[topic]
	if o.Partition >= 0 {
		end, ok := ends[o.Partition]
		if !ok {
			return fmt.Errorf("peek: %s has no partition %d", topic, o.Partition)
		}
		ends = map[int32]int64{o.Partition: end}
	}
	tailN, tail := tailCount(o.Offset)
	from := map[int32]int64{}
	for p, end := range ends {
		if tail {
			from[p] = end // the last records are read first, below
			continue
		}
		if from[p], err = startOffset(o.Offset, starts[p], end); err != nil {
			return err
		}
	}
	pr := &peekPrinter{enc: json.NewEncoder(w), topics: cfg.Kafka.Topics, count: o.Count}
	for _, p := range slices.Sorted(maps.Keys(ends)) {
		if !tail {
			continue
		}
		recs, err := lastRecords(ctx, cfg, topic, p, starts[p], ends[p], tailN, o.Idle)
		if err != nil {
			return err
		}
		for _, r := range recs {
			if done, err := pr.print(r); done || err != nil {
				return err
			}
		}
	}
	if !o.Follow {
		for p, end := range ends {
			if from[p] >= end {
				delete(ends, p)
			}
		}
		if len(ends) == 0 {
			return nil
		}
	} else {
		ends = nil
	}
	return consume(ctx, cfg, topic, from, ends, o.Idle, pr.print)
}

// consume reads topic read_committed from the offsets in from and passes
// every data record to fn until fn says stop, or, when ends is non-nil,
// until each partition reached its end (or nothing arrived for idle: the
// tail of an aborted transaction can hide the last offsets). With a nil
// ends it runs until ctx ends.
func consume(ctx context.Context, cfg *config.Config, topic string, from, ends map[int32]int64, idle time.Duration, fn func(*kgo.Record) (bool, error)) error {
	offsets := map[int32]kgo.Offset{}
	for p, at := range from {
		offsets[p] = kgo.NewOffset().At(at)
	}
	cl, err := cfg.Kafka.Cluster(nil, nil).NewClient("peek",
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords())
	if err != nil {
		return err
	}
	defer cl.Close()
	var until kafkax.Offsets
	if ends != nil {
		until = kafkax.Offsets{topic: ends}
	}
	err = kafkax.ReadToEnd(ctx, cl, kafkax.Offsets{topic: from}, until, idle, kafkax.DataRecords(fn))
	switch {
	case ctx.Err() != nil:
		return nil // interrupted: what was printed stands
	case err != nil:
		return fmt.Errorf("peek: %w", err)
	}
	return nil
}

// lastRecords returns the last n data records of partition p before end:
// transaction markers and aborted records take offsets too, so it looks
// 2n offsets back first and four times further each time that held fewer.
func lastRecords(ctx context.Context, cfg *config.Config, topic string, p int32, start, end int64, n int, idle time.Duration) ([]*kgo.Record, error) {
	for window := 2 * int64(n); ; window *= 4 {
		from := max(start, end-window)
		if from >= end {
			return nil, nil
		}
		var recs []*kgo.Record
		err := consume(ctx, cfg, topic, map[int32]int64{p: from}, map[int32]int64{p: end}, idle, func(r *kgo.Record) (bool, error) {
			if r.Offset < end {
				recs = append(recs, r)
			}
			return false, nil
		})
		if err != nil || len(recs) >= n || from == start || ctx.Err() != nil {
			return recs[max(0, len(recs)-n):], err
		}
	}
}

// peekPrinter prints records as JSON lines up to count (0: no limit).
type peekPrinter struct {
	enc     *json.Encoder
	topics  config.Topics
	count   int
	printed int
}

func (p *peekPrinter) print(r *kgo.Record) (bool, error) {
	if err := p.enc.Encode(decodeRecord(p.topics, r)); err != nil {
		return true, err
	}
	p.printed++
	return p.count > 0 && p.printed >= p.count, nil
}

// tailCount parses --offset -N.
func tailCount(flag string) (int, bool) {
	n, err := strconv.Atoi(flag)
	return -n, err == nil && n < 0
}

// startOffset turns --offset into an absolute offset within [start, end].
func startOffset(flag string, start, end int64) (int64, error) {
	switch flag {
	case "start":
		return start, nil
	case "end":
		return end, nil
	}
	n, err := strconv.ParseInt(flag, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("peek: --offset must be start, end, N or -N (got %q)", flag)
	}
	return min(max(n, start), end), nil
}

// peekRecord is one printed line.
type peekRecord struct {
	Topic       string            `json:"topic"`
	Partition   int32             `json:"partition"`
	Offset      int64             `json:"offset"`
	TimestampMs int64             `json:"timestamp_ms"`
	Key         string            `json:"key"`
	Headers     map[string]string `json:"headers"`
	Type        string            `json:"type,omitempty"`
	Value       json.RawMessage   `json:"value,omitempty"`
	Payload     json.RawMessage   `json:"payload,omitempty"` // an envelope's payload, decoded by its event_type
	ValueBase64 []byte            `json:"value_base64,omitempty"`
	DecodeError string            `json:"decode_error,omitempty"`
	Tombstone   bool              `json:"tombstone,omitempty"` // a null value: on a compacted topic, its key deleted
}

var peekJSON = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}

// topicTypes is the value type of each topic of the design; DLQ and the
// internal compacted topics are absent (shown raw).
func topicTypes(t config.Topics) map[string]proto.Message {
	return map[string]proto.Message{
		t.RoomEvents:        &roomv1.EventEnvelope{},
		t.UserMicEvents:     &roomv1.EventEnvelope{},
		t.MicLedger:         &userv1.MicLedgerEntry{},
		t.MicSessionClosed:  &userv1.UserMicSessionClosed{},
		t.MicDailyStats:     &userv1.UserMicDailyStatsUpdated{},
		t.MicLifetimeStats:  &userv1.UserMicLifetimeStatsUpdated{},
		t.MicDailyTotals:    &userv1.UserMicDailyTotals{},
		t.MicLifetimeTotals: &userv1.UserMicLifetimeTotals{},
		t.LuckyPoolInflow:   &activityv1.LuckyPoolInflow{},
	}
}

// decodeRecord decodes r's value by its topic, else by its event_type
// header (the lucky events topic always; a room event type on another
// topic is an envelope routed there by relay.routes); DLQ and unknown
// values stay raw.
func decodeRecord(topics config.Topics, r *kgo.Record) peekRecord {
	out := peekRecord{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, TimestampMs: r.Timestamp.UnixMilli(),
		Key: string(r.Key), Headers: map[string]string{}}
	for _, h := range r.Headers {
		out.Headers[h.Key] = string(h.Value)
	}
	if r.Value == nil { // no message: decoding would show one of zeros
		out.Tombstone = true
		return out
	}
	var msg proto.Message
	if m, ok := topicTypes(topics)[r.Topic]; ok && r.Topic != topics.DLQ {
		msg = proto.Clone(m)
	} else if ct := out.Headers[envelope.HeaderContentType]; r.Topic == topics.LuckyEvents ||
		(r.Topic != topics.DLQ && (ct == envelope.ContentType || ct == envelope.ContentTypeConfluent)) {
		if mt := hyappType(out.Headers[envelope.HeaderEventType]); mt != nil {
			msg = mt.New().Interface()
			if mt.Descriptor().ParentFile().Package() == "hyapp.room.v1" {
				msg = &roomv1.EventEnvelope{}
			}
		}
	}
	if msg == nil {
		out.ValueBase64 = r.Value
		return out
	}
	value, err := envelope.Payload(r) // plain or Confluent-framed, per record
	if err == nil {
		err = proto.Unmarshal(value, msg)
	}
	if err != nil {
		out.ValueBase64, out.DecodeError = r.Value, err.Error()
		return out
	}
	out.Type = string(msg.ProtoReflect().Descriptor().FullName())
	out.Value, _ = peekJSON.Marshal(msg)
	if env, ok := msg.(*roomv1.EventEnvelope); ok {
		if mt := hyappType(env.GetEventType()); mt != nil && mt.Descriptor().ParentFile().Package() == "hyapp.room.v1" {
			p := mt.New().Interface()
			if err := proto.Unmarshal(env.GetPayload(), p); err != nil {
				out.DecodeError = "payload: " + err.Error()
			} else {
				out.Payload, _ = peekJSON.Marshal(p)
			}
		}
	}
	return out
}

// hyappType finds the message named name in the hyapp packages.
func hyappType(name string) protoreflect.MessageType {
	if name == "" || strings.Contains(name, ".") {
		return nil
	}
	for _, pkg := range hyappPackages {
		if mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(pkg + "." + name)); err == nil {
			return mt
		}
	}
	return nil
}

// hyappPackages are the proto packages of schemas/ (message names are
// unique across them).
var hyappPackages = func() []string {
	set := map[string]bool{}
	for _, m := range []proto.Message{&roomv1.EventEnvelope{}, &userv1.MicLedgerEntry{}, &activityv1.LuckyPoolInflow{}} {
		set[string(m.ProtoReflect().Descriptor().ParentFile().Package())] = true
	}
	return slices.Sorted(maps.Keys(set))
}()
