package relay

import (
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Row is one room_outbox row as the relay reads it. The relay never decodes
// Payload: a malformed envelope is forwarded as bytes and is the
// processors' problem.
type Row struct {
	ID          uint64
	AppCode     string
	EventID     string
	EventType   string
	RoomID      string
	RoomVersion int64
	Payload     []byte
	// PayloadBytes is LENGTH(payload) as stored. Payload is not loaded
	// (nil) for a row that goes to the DLQ as too large.
	PayloadBytes int
	OccurredAtMs int64
}

// size is the payload's stored length, whether loaded or not.
func (row *Row) size() int { return max(len(row.Payload), row.PayloadBytes) }

// DLQReason names why a row went to the dead-letter topic instead of its
// route; it is the value of the record's "error" header and of its
// "error_reason" header, the one the processors' and the sink's DLQ
// records carry their reason in too.
type DLQReason string

const (
	// DLQEmptyPayload: the row's payload is empty; there is no event.
	DLQEmptyPayload DLQReason = "empty_payload"
	// DLQTooLarge: the record would exceed relay.max_record_bytes, so the
	// topic would refuse it. The DLQ record carries no value (it would be
	// refused too) and a payload_bytes header with the original size.
	DLQTooLarge DLQReason = "payload_too_large"
	// DLQRejected: the broker refused the record (for example a topic whose
	// max.message.bytes is below relay.max_record_bytes). The value is
	// dropped as for DLQTooLarge.
	DLQRejected DLQReason = "rejected_by_broker"
	// DLQGapAbandoned: not a row but a run of outbox ids the relay gave up
	// waiting for (relay.gap_max_age or relay.max_open_gaps); see
	// Router.GapRecord. Rows that commit with those ids later are never
	// relayed, so this record is the durable list of what may be missing.
	DLQGapAbandoned DLQReason = "gap_abandoned"
)

// ContentType is the content-type header of every relayed record.
const ContentType = "application/x-protobuf"

// recordOverhead is a generous allowance for the per-record and per-batch
// framing a lone record needs on the wire (batch header 61 bytes, record
// varints, header lengths).
const recordOverhead = 128

// Router maps rows to records: topic by event_type (relay.routes, default
// kafka.topics.room_events), dead-letter decisions, headers.
type Router struct {
	Default        string
	Routes         map[string]string
	DLQ            string
	MaxRecordBytes int
}

// Classify returns the dead-letter reason for a row, or "" when it is
// relayed normally.
func (r Router) Classify(row *Row) DLQReason {
	if row.size() == 0 {
		return DLQEmptyPayload
	}
	// Header keys take ~60 bytes and the two decimal numbers at most 40.
	size := row.size() + len(row.RoomID) + len(row.EventID) + len(row.EventType) +
		len(row.AppCode) + len(ContentType) + 100 + recordOverhead
	if r.MaxRecordBytes > 0 && size > r.MaxRecordBytes {
		return DLQTooLarge
	}
	return ""
}

// Topic is the route of an event type.
func (r Router) Topic(eventType string) string {
	if t, ok := r.Routes[eventType]; ok && t != "" {
		return t
	}
	return r.Default
}

// Record builds the Kafka record for row. forced, when not empty, sends the
// row to the DLQ for that reason regardless of Classify (used after a
// broker refused it).
func (r Router) Record(row *Row, forced DLQReason) (rec *kgo.Record, dlq DLQReason) {
	dlq = forced
	if dlq == "" {
		dlq = r.Classify(row)
	}
	rec = &kgo.Record{
		Key:       []byte(row.RoomID),
		Timestamp: time.UnixMilli(row.OccurredAtMs),
		Headers:   row.headers(),
	}
	switch dlq {
	case "":
		rec.Topic = r.Topic(row.EventType)
		rec.Value = row.Payload
	default:
		rec.Topic = r.DLQ
		rec.Headers = append(rec.Headers,
			kgo.RecordHeader{Key: "error", Value: []byte(dlq)},
			kgo.RecordHeader{Key: "error_reason", Value: []byte(dlq)},
			kgo.RecordHeader{Key: "source", Value: []byte("room_outbox")},
			kgo.RecordHeader{Key: "source_id", Value: []byte(strconv.FormatUint(row.ID, 10))},
			kgo.RecordHeader{Key: "source_topic", Value: []byte(r.Topic(row.EventType))},
		)
		if dlq == DLQEmptyPayload {
			rec.Value = row.Payload
		} else {
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: "payload_bytes", Value: []byte(strconv.Itoa(row.size()))})
		}
	}
	return rec, dlq
}

// GapRecord is the DLQ record of an abandoned run of ids: no key or value,
// headers error and error_reason (gap_abandoned), source=room_outbox,
// source_id_from and source_id_to (inclusive), gap_reason (max_age or
// max_open_gaps) and open_ms (how long the lowest id was waited for). It is
// produced in the transaction of the position that drops the run.
func (r Router) GapRecord(a Abandoned) *kgo.Record {
	return &kgo.Record{Topic: r.DLQ, Headers: []kgo.RecordHeader{
		{Key: "error", Value: []byte(DLQGapAbandoned)},
		{Key: "error_reason", Value: []byte(DLQGapAbandoned)},
		{Key: "source", Value: []byte("room_outbox")},
		{Key: "source_id_from", Value: []byte(strconv.FormatUint(a.From, 10))},
		{Key: "source_id_to", Value: []byte(strconv.FormatUint(a.To, 10))},
		{Key: "gap_reason", Value: []byte(a.Reason)},
		{Key: "open_ms", Value: []byte(strconv.FormatInt(a.OpenFor.Milliseconds(), 10))},
	}}
}

func (row *Row) headers() []kgo.RecordHeader {
	return []kgo.RecordHeader{
		{Key: "event_id", Value: []byte(row.EventID)},
		{Key: "event_type", Value: []byte(row.EventType)},
		{Key: "app_code", Value: []byte(row.AppCode)},
		{Key: "room_version", Value: []byte(strconv.FormatInt(row.RoomVersion, 10))},
		{Key: "occurred_at_ms", Value: []byte(strconv.FormatInt(row.OccurredAtMs, 10))},
		{Key: "content-type", Value: []byte(ContentType)},
	}
}
