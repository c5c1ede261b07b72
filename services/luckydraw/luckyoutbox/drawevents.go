package luckyoutbox

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
)

// Values of lucky.outbox_format: where the draw transaction writes a
// draw's lucky events.
const (
	// FormatRows writes a lucky_outbox row per event (every release
	// reads it).
	FormatRows = "rows"
	// FormatDrawEvents writes one lucky_draw_events row per draw carrying
	// its events (issue 36): only this release's worker reads it.
	FormatDrawEvents = "draw_events"
)

// CheckFormat reports an unknown lucky.outbox_format.
func CheckFormat(f string) error {
	if f != FormatRows && f != FormatDrawEvents {
		return fmt.Errorf("must be %s or %s (got %q)", FormatRows, FormatDrawEvents, f)
	}
	return nil
}

// Event is one lucky event of a lucky_draw_events row: what a lucky_outbox
// activity_event row holds of it.
type Event struct {
	MessageType string
	EventID     string
	Key         string // the record key (gift_id)
	Payload     []byte
}

// Field numbers of the events column: a protobuf message whose field 1
// repeats an embedded (1 message_type, 2 event_id, 3 key, 4 payload).
const (
	fieldEvent       protowire.Number = 1
	fieldMessageType protowire.Number = 1
	fieldEventID     protowire.Number = 2
	fieldKey         protowire.Number = 3
	fieldPayload     protowire.Number = 4
)

// EncodeEvents is the events column of a draw's events.
func EncodeEvents(events []Event) []byte {
	var b []byte
	for _, e := range events {
		b = appendEvent(b, e)
	}
	return b
}

// appendEvent appends e, sized first, with no intermediate value.
func appendEvent(b []byte, e Event) []byte {
	n := 0
	for _, f := range [...]string{e.MessageType, e.EventID, e.Key} {
		n += protowire.SizeTag(1) + protowire.SizeBytes(len(f))
	}
	n += protowire.SizeTag(1) + protowire.SizeBytes(len(e.Payload))
	b = protowire.AppendTag(b, fieldEvent, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	b = protowire.AppendTag(b, fieldMessageType, protowire.BytesType)
	b = protowire.AppendString(b, e.MessageType)
	b = protowire.AppendTag(b, fieldEventID, protowire.BytesType)
	b = protowire.AppendString(b, e.EventID)
	b = protowire.AppendTag(b, fieldKey, protowire.BytesType)
	b = protowire.AppendString(b, e.Key)
	b = protowire.AppendTag(b, fieldPayload, protowire.BytesType)
	return protowire.AppendBytes(b, e.Payload)
}

// ErrUndecodable is wrapped by DecodeEvents' errors: the row is failed
// with the reason, never produced.
var ErrUndecodable = errors.New("undecodable draw_events row")

// DecodeEvents reads an events column strictly: every field known and
// well formed, each event with an event id and one of EventMessageTypes.
// The payloads alias b.
func DecodeEvents(b []byte) ([]Event, error) {
	var out []Event
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num != fieldEvent || typ != protowire.BytesType {
			return nil, fmt.Errorf("%w: event %d: bad tag", ErrUndecodable, len(out))
		}
		b = b[n:]
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil, fmt.Errorf("%w: event %d: truncated", ErrUndecodable, len(out))
		}
		b = b[n:]
		e, err := decodeEvent(v)
		if err != nil {
			return nil, fmt.Errorf("%w: event %d: %w", ErrUndecodable, len(out), err)
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no event", ErrUndecodable)
	}
	return out, nil
}

// messageTypes is EventMessageTypes, read once.
var messageTypes = EventMessageTypes()

func decodeEvent(b []byte) (Event, error) {
	var e Event
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType || num < fieldMessageType || num > fieldPayload {
			return e, errors.New("bad field")
		}
		b = b[n:]
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return e, errors.New("truncated field")
		}
		b = b[n:]
		switch num {
		case fieldMessageType:
			e.MessageType = string(v)
		case fieldEventID:
			e.EventID = string(v)
		case fieldKey:
			e.Key = string(v)
		case fieldPayload:
			e.Payload = v
		}
	}
	switch {
	case e.EventID == "":
		return e, errors.New("no event id")
	case !slices.Contains(messageTypes, e.MessageType):
		return e, fmt.Errorf("%s: unknown message type %q", e.EventID, e.MessageType)
	}
	return e, nil
}

// MessageTypes is the message_types column of events: their distinct
// message types in order of appearance, comma-separated.
func MessageTypes(events []Event) string {
	var ts []string
	for _, e := range events {
		if !slices.Contains(ts, e.MessageType) {
			ts = append(ts, e.MessageType)
		}
	}
	return strings.Join(ts, ",")
}
