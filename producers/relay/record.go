package relay

import (
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/schemas/envelope"
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
		len(row.AppCode) + len(envelope.ContentType) + 100 + recordOverhead
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

// Record builds the Kafka record for row, timestamped occurred_at_ms (the
// relay re-stamps one a broker would refuse, see Stamp). forced, when not
// empty, sends the row to the DLQ for that reason regardless of Classify
// (used after a broker refused it).
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
	if dlq == "" {
		rec.Topic = r.Topic(row.EventType)
		rec.Value = row.Payload
		return rec, dlq
	}
	d := envelope.DeadLetter{Stage: Stage, Reason: string(dlq), Source: envelope.SourceRoomOutbox, SourceID: row.ID,
		SourceTopic: r.Topic(row.EventType), Key: rec.Key, Headers: rec.Headers}
	if dlq == DLQEmptyPayload {
		d.Value = row.Payload
	} else {
		d.Extra = []kgo.RecordHeader{{Key: envelope.HeaderPayloadBytes, Value: []byte(strconv.Itoa(row.size()))}}
	}
	out := d.Build(r.DLQ)
	out.Timestamp = rec.Timestamp
	return out, dlq
}

// GapRecord is the DLQ record of an abandoned run of ids: no key or value,
// headers error and error_reason (gap_abandoned), source=room_outbox,
// source_id_from and source_id_to (inclusive), gap_reason (max_age or
// max_open_gaps) and open_ms (how long the lowest id was waited for). It is
// produced in the transaction of the position that drops the run.
func (r Router) GapRecord(a Abandoned) *kgo.Record {
	d := envelope.DeadLetter{Stage: Stage, Reason: string(DLQGapAbandoned), Source: envelope.SourceRoomOutbox, Extra: []kgo.RecordHeader{
		{Key: envelope.HeaderSourceIDFrom, Value: []byte(strconv.FormatUint(a.From, 10))},
		{Key: envelope.HeaderSourceIDTo, Value: []byte(strconv.FormatUint(a.To, 10))},
		{Key: envelope.HeaderGapReason, Value: []byte(a.Reason)},
		{Key: envelope.HeaderOpenMs, Value: []byte(strconv.FormatInt(a.OpenFor.Milliseconds(), 10))},
	}}
	return d.Build(r.DLQ)
}

// MaxFutureSkew is how far ahead of the relay's clock occurred_at_ms may
// lie and still be the record's timestamp: Kafka 4.0's default
// message.timestamp.after.max.ms (KIP-1030; unbounded in 3.x), past which
// such a broker refuses the record with INVALID_TIMESTAMP.
const MaxFutureSkew = time.Hour

// RestampReason names why a record carries the relay's time instead of its
// row's occurred_at_ms, which stays in the occurred_at_ms header and the
// payload either way.
type RestampReason string

const (
	// RestampNotPositive: occurred_at_ms is 0 or negative, no time at all.
	RestampNotPositive RestampReason = "not_positive"
	// RestampFuture: occurred_at_ms is more than MaxFutureSkew ahead (a
	// room-service host whose clock runs fast, a time written in µs).
	RestampFuture RestampReason = "future"
	// RestampRefused: the broker answered INVALID_TIMESTAMP all the same
	// (a topic's message.timestamp.before.max.ms or after.max.ms, a relay
	// clock behind the broker's).
	RestampRefused RestampReason = "refused_by_broker"
)

// Stamp is the timestamp of row's record at the relay's time now, and why
// it is not occurred_at_ms ("" when it is). refused: the broker refused
// occurred_at_ms before.
func Stamp(row *Row, now time.Time, refused bool) (time.Time, RestampReason) {
	switch {
	case refused:
		return now, RestampRefused
	case row.OccurredAtMs <= 0:
		return now, RestampNotPositive
	case row.OccurredAtMs > now.Add(MaxFutureSkew).UnixMilli():
		return now, RestampFuture
	}
	return time.UnixMilli(row.OccurredAtMs), ""
}

// Stage is the stage header of the relay's dead letters.
const Stage = "relay"

// headers are the standard headers plus room_version and occurred_at_ms.
func (row *Row) headers() []kgo.RecordHeader {
	h := envelope.AppendHeaders(make([]kgo.RecordHeader, 0, 6), []byte(row.EventID), []byte(row.EventType), []byte(row.AppCode))
	return append(h,
		kgo.RecordHeader{Key: envelope.HeaderRoomVersion, Value: strconv.AppendInt(nil, row.RoomVersion, 10)},
		kgo.RecordHeader{Key: envelope.HeaderOccurredAtMs, Value: strconv.AppendInt(nil, row.OccurredAtMs, 10)},
	)
}
