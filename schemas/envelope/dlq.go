package envelope

import (
	"strconv"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Dead-letter header keys, one set for every stage (README, Operations:
// Dead letters). Consumers filter and re-drive by them: keys are only ever
// added.
const (
	HeaderStage           = "stage"        // relay, room, mic, sink: the stage that refused the record
	HeaderError           = "error"        // the error message, at most MaxErrorBytes
	HeaderErrorReason     = "error_reason" // a short stable code to filter on
	HeaderSourceTopic     = "source_topic"
	HeaderSourcePartition = "source_partition"
	HeaderSourceOffset    = "source_offset"
	HeaderSource          = "source"    // a table source: room_outbox
	HeaderSourceID        = "source_id" // the row id in that table
	HeaderPayloadBytes    = "payload_bytes"
	HeaderSourceIDFrom    = "source_id_from" // gap_abandoned: first id of the run
	HeaderSourceIDTo      = "source_id_to"   // gap_abandoned: last id, inclusive
	HeaderGapReason       = "gap_reason"
	HeaderOpenMs          = "open_ms"
)

// SourceRoomOutbox is the source header of records that come from the
// room_outbox table rather than a topic.
const SourceRoomOutbox = "room_outbox"

// MaxErrorBytes bounds the error header: an error that quotes a large
// value must not make the dead letter bigger than the topic accepts. Longer
// messages are cut at a UTF-8 boundary.
const MaxErrorBytes = 1024

// DeadLetter is one record refused by a stage. Build turns it into the DLQ
// record every stage writes: the refused record's key, value and headers
// (or those of the table row), then stage, error, error_reason, the source
// coordinates and Extra, in that order.
type DeadLetter struct {
	Stage  string
	Reason string
	// Err is the error header; nil writes Reason there.
	Err error
	// From is the refused Kafka record: its key, value and headers are
	// kept and its position becomes source_topic, source_partition and
	// source_offset.
	From *kgo.Record
	// A table source (the relay): Source names the table, SourceID the row
	// (0: none, e.g. a run of ids in Extra), SourceTopic the topic the row
	// was routed to (empty: none); Key, Value and Headers are the row's.
	Source      string
	SourceID    uint64
	SourceTopic string
	Key, Value  []byte
	Headers     []kgo.RecordHeader
	// Extra are stage-specific headers (payload_bytes, source_id_from, ...).
	Extra []kgo.RecordHeader
}

// Build returns the dead-letter record for topic.
func (d *DeadLetter) Build(topic string) *kgo.Record {
	key, value, orig := d.Key, d.Value, d.Headers
	if d.From != nil {
		key, value, orig = d.From.Key, d.From.Value, d.From.Headers
	}
	msg := d.Reason
	if d.Err != nil {
		msg = d.Err.Error()
	}
	h := make([]kgo.RecordHeader, 0, len(orig)+8+len(d.Extra))
	h = append(h, orig...)
	h = append(h,
		kgo.RecordHeader{Key: HeaderStage, Value: []byte(d.Stage)},
		kgo.RecordHeader{Key: HeaderError, Value: []byte(TruncateError(msg))},
		kgo.RecordHeader{Key: HeaderErrorReason, Value: []byte(d.Reason)},
	)
	if d.From != nil {
		h = append(h,
			kgo.RecordHeader{Key: HeaderSourceTopic, Value: []byte(d.From.Topic)},
			kgo.RecordHeader{Key: HeaderSourcePartition, Value: strconv.AppendInt(nil, int64(d.From.Partition), 10)},
			kgo.RecordHeader{Key: HeaderSourceOffset, Value: strconv.AppendInt(nil, d.From.Offset, 10)},
		)
	}
	if d.Source != "" {
		h = append(h, kgo.RecordHeader{Key: HeaderSource, Value: []byte(d.Source)})
	}
	if d.SourceID != 0 {
		h = append(h, kgo.RecordHeader{Key: HeaderSourceID, Value: strconv.AppendUint(nil, d.SourceID, 10)})
	}
	if d.SourceTopic != "" {
		h = append(h, kgo.RecordHeader{Key: HeaderSourceTopic, Value: []byte(d.SourceTopic)})
	}
	h = append(h, d.Extra...)
	return &kgo.Record{Topic: topic, Key: key, Value: value, Headers: h}
}

// TruncateError cuts msg to at most MaxErrorBytes, at a UTF-8 boundary.
func TruncateError(msg string) string {
	if len(msg) <= MaxErrorBytes {
		return msg
	}
	cut := MaxErrorBytes
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut]
}
