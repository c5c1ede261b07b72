package envelope

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Dead-letter header keys, one set for every stage (docs/operations.md,
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
func TruncateError(msg string) string { return Clip(msg, MaxErrorBytes) }

// Clip returns s cut to at most n bytes at a UTF-8 character boundary:
// the one home for bounding text bound for a header, a utf8mb4 column
// (MySQL refuses a split character with error 1366) or a metric label
// (Prometheus panics on one).
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// ErrNotDeadLetter is returned by ParseDeadLetter for a record that does
// not carry the stage, error and error_reason headers Build writes.
var ErrNotDeadLetter = errors.New("envelope: not a dead letter (no stage, error, error_reason headers)")

// Letter is a dead-letter record read back: the inverse of
// DeadLetter.Build, the one place the DLQ headers are parsed.
type Letter struct {
	Stage, Reason, Error string
	// SourceTopic is the topic of the refused record (Kafka sources) or
	// the topic the table row was routed to (the relay); empty for a run
	// of ids (gap_abandoned) and a row that had no route.
	SourceTopic string
	// HasOffset: the refused record came from Kafka, at SourcePartition
	// and SourceOffset of SourceTopic.
	HasOffset       bool
	SourcePartition int32
	SourceOffset    int64
	// Source and SourceID name a table row (the relay: room_outbox, id).
	Source   string
	SourceID uint64
	// Key, Value and Headers are the refused record's (or row's) own: the
	// headers before the dead-letter headers, in order.
	Key, Value []byte
	Headers    []kgo.RecordHeader
	// Extra are the dead-letter headers after the source coordinates
	// (payload_bytes, source_id_from, ...; keys a later release adds).
	Extra []kgo.RecordHeader
}

// ParseDeadLetter reads r as Build wrote it. The dead-letter headers start
// at the last stage header followed by error and error_reason, so a
// refused record's own headers (whatever their keys) stay its own. It
// fails with ErrNotDeadLetter for a record without them and with a
// descriptive error for a malformed source coordinate.
func ParseDeadLetter(r *kgo.Record) (Letter, error) {
	h := r.Headers
	at := -1
	for i := len(h) - 3; i >= 0; i-- {
		if h[i].Key == HeaderStage && h[i+1].Key == HeaderError && h[i+2].Key == HeaderErrorReason {
			at = i
			break
		}
	}
	if at < 0 {
		return Letter{}, ErrNotDeadLetter
	}
	l := Letter{Stage: string(h[at].Value), Error: string(h[at+1].Value), Reason: string(h[at+2].Value),
		Key: r.Key, Value: r.Value, Headers: h[:at:at]}
	var err error
	for _, x := range h[at+3:] {
		switch x.Key {
		case HeaderSourceTopic:
			l.SourceTopic = string(x.Value)
		case HeaderSourcePartition:
			var p int64
			p, err = strconv.ParseInt(string(x.Value), 10, 32)
			l.SourcePartition, l.HasOffset = int32(p), err == nil
		case HeaderSourceOffset:
			l.SourceOffset, err = strconv.ParseInt(string(x.Value), 10, 64)
		case HeaderSource:
			l.Source = string(x.Value)
		case HeaderSourceID:
			l.SourceID, err = strconv.ParseUint(string(x.Value), 10, 64)
		default:
			l.Extra = append(l.Extra, x)
		}
		if err != nil {
			return Letter{}, fmt.Errorf("envelope: dead letter header %s=%q: %w", x.Key, x.Value, err)
		}
	}
	return l, nil
}

// ExtraValue returns the value of the first Extra header named key, or
// nil.
func (l Letter) ExtraValue(key string) []byte {
	for _, h := range l.Extra {
		if h.Key == key {
			return h.Value
		}
	}
	return nil
}

// Origin identifies the record a letter refused: its Kafka coordinates, or
// its table row. The MySQL sink dead-letters outside its transaction, so
// a batch that never commits dead-letters its record again with the same
// headers: letters with one Origin are one refused record.
type Origin struct {
	Topic     string
	Partition int32
	Offset    int64
	Source    string
	SourceID  uint64
}

// Origin returns the letter's origin; ok is false when it names no single
// record (a gap_abandoned run of ids).
func (l Letter) Origin() (o Origin, ok bool) {
	switch {
	case l.HasOffset:
		return Origin{Topic: l.SourceTopic, Partition: l.SourcePartition, Offset: l.SourceOffset}, true
	case l.Source != "" && l.SourceID != 0:
		return Origin{Source: l.Source, SourceID: l.SourceID}, true
	}
	return Origin{}, false
}

// RedriveError says why a letter cannot go back to its source topic.
type RedriveError struct{ Reason string }

func (e *RedriveError) Error() string { return "envelope: cannot re-drive: " + e.Reason }

// Redrive returns the record that re-drives the letter: the refused
// record's key, value and own headers (event_id, event_type, app_code,
// ...; no dead-letter header) on SourceTopic, partitioned by key like
// every roomflow producer. It returns a *RedriveError for a letter
// without a source topic (a run of ids) or without a value (the relay
// drops a payload too large for the topic, and an empty payload is no
// event): there is nothing to send.
func (l Letter) Redrive() (*kgo.Record, error) {
	switch {
	case l.SourceTopic == "":
		if l.Reason != "" {
			return nil, &RedriveError{Reason: "no source topic (" + l.Reason + " names no record to send)"}
		}
		return nil, &RedriveError{Reason: "no source topic"}
	case len(l.Value) == 0:
		return nil, &RedriveError{Reason: "no value (" + l.Reason + ": the stage kept none; fix the source row or record and produce it again)"}
	}
	return &kgo.Record{Topic: l.SourceTopic, Key: l.Key, Value: l.Value, Headers: slices.Clone(l.Headers)}, nil
}
