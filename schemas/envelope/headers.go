package envelope

import "github.com/twmb/franz-go/pkg/kgo"

// ContentType is the content-type header value of every roomflow record:
// the value is a protobuf message (the event_type header names it).
const ContentType = "application/x-protobuf"

// Standard header keys: every record a roomflow stage writes carries them
// (the relay adds HeaderRoomVersion and HeaderOccurredAtMs).
const (
	HeaderEventID      = "event_id"
	HeaderEventType    = "event_type"
	HeaderAppCode      = "app_code"
	HeaderContentType  = "content-type"
	HeaderRoomVersion  = "room_version"
	HeaderOccurredAtMs = "occurred_at_ms"
)

// contentType is shared by every record's header: kgo never modifies
// header values.
var contentType = []byte(ContentType)

// AppendHeaders appends the standard headers event_id, event_type,
// app_code and content-type to h and returns it. The values are not copied:
// they may alias the record value or an arena, as long as they stay
// unchanged until the record is produced.
func AppendHeaders(h []kgo.RecordHeader, eventID, eventType, appCode []byte) []kgo.RecordHeader {
	return AppendHeadersAs(h, eventID, eventType, appCode, contentType)
}

// AppendHeadersAs is AppendHeaders with the content-type value ct (a
// public record's Framing.Header()).
func AppendHeadersAs(h []kgo.RecordHeader, eventID, eventType, appCode, ct []byte) []kgo.RecordHeader {
	return append(h,
		kgo.RecordHeader{Key: HeaderEventID, Value: eventID},
		kgo.RecordHeader{Key: HeaderEventType, Value: eventType},
		kgo.RecordHeader{Key: HeaderAppCode, Value: appCode},
		kgo.RecordHeader{Key: HeaderContentType, Value: ct},
	)
}

// Header returns the value of the first header of r named key, or nil.
func Header(r *kgo.Record, key string) []byte {
	for i := range r.Headers {
		if r.Headers[i].Key == key {
			return r.Headers[i].Value
		}
	}
	return nil
}
