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
	ID           uint64
	AppCode      string
	EventID      string
	EventType    string
	RoomID       string
	RoomVersion  int64
	Payload      []byte
	OccurredAtMs int64
}

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
	if len(row.Payload) == 0 {
		return DLQEmptyPayload
	}
	// Header keys take ~60 bytes and the two decimal numbers at most 40.
	size := len(row.Payload) + len(row.RoomID) + len(row.EventID) + len(row.EventType) +
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
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: "payload_bytes", Value: []byte(strconv.Itoa(len(row.Payload)))})
		}
	}
	return rec, dlq
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
