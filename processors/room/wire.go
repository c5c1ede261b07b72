package room

import (
	"errors"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// The hot path reads EventEnvelope and RoomMicChanged straight from the
// wire: the fields it needs become sub-slices of the record value (zero
// copies, zero allocations; header values can point into the value that
// is forwarded unchanged anyway). Acceptance matches proto.Unmarshal for
// these messages: malformed wire data, truncation and invalid UTF-8 in
// any string field are errors; unknown fields, and known fields with an
// unexpected wire type, are skipped as unknown fields; for a repeated
// scalar the last occurrence wins. wire_test.go checks this against
// proto.Unmarshal on mutated inputs.

var (
	errInvalidUTF8 = errors.New("string field contains invalid UTF-8")
	errFieldNumber = errors.New("invalid field number")
)

// envelopeView is an EventEnvelope whose fields alias the input bytes.
type envelopeView struct {
	eventID, eventType, appCode, roomID []byte
	requestID, commandID, payload       []byte
	roomVersion, occurredAtMs           int64
}

func parseEnvelope(b []byte, v *envelopeView) error {
	*v = envelopeView{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		if num > protowire.MaxValidNumber {
			return errFieldNumber
		}
		b = b[n:]
		switch {
		case typ == protowire.BytesType && (num >= 1 && num <= 4 || num >= 7 && num <= 9):
			val, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return protowire.ParseError(m)
			}
			b = b[m:]
			if num != 9 && !utf8.Valid(val) {
				return errInvalidUTF8
			}
			switch num {
			case 1:
				v.eventID = val
			case 2:
				v.eventType = val
			case 3:
				v.appCode = val
			case 4:
				v.roomID = val
			case 7:
				v.requestID = val
			case 8:
				v.commandID = val
			case 9:
				v.payload = val
			}
		case typ == protowire.VarintType && (num == 5 || num == 6):
			x, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return protowire.ParseError(m)
			}
			b = b[m:]
			if num == 5 {
				v.roomVersion = int64(x)
			} else {
				v.occurredAtMs = int64(x)
			}
		default:
			m := protowire.ConsumeFieldValue(num, typ, b)
			if m < 0 {
				return protowire.ParseError(m)
			}
			b = b[m:]
		}
	}
	return nil
}

// micUserID validates a RoomMicChanged and returns its user_id.
func micUserID(b []byte) (int64, error) {
	var user int64
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, protowire.ParseError(n)
		}
		if num > protowire.MaxValidNumber {
			return 0, errFieldNumber
		}
		b = b[n:]
		switch {
		case typ == protowire.BytesType && num >= 3 && num <= 6: // action, mic_session_id, publish_state, reason
			val, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return 0, protowire.ParseError(m)
			}
			b = b[m:]
			if !utf8.Valid(val) {
				return 0, errInvalidUTF8
			}
		case typ == protowire.VarintType && num == 1:
			x, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return 0, protowire.ParseError(m)
			}
			b = b[m:]
			user = int64(x)
		default:
			m := protowire.ConsumeFieldValue(num, typ, b)
			if m < 0 {
				return 0, protowire.ParseError(m)
			}
			b = b[m:]
		}
	}
	return user, nil
}

// withAppCode returns a copy of the envelope b with app_code set to app:
// the field appended at the end, where protobuf parsers let the last
// occurrence of a singular field win (b is left unchanged; it is the
// consumed record's value).
func withAppCode(b, app []byte) []byte {
	out := make([]byte, 0, len(b)+2+len(app))
	out = append(out, b...)
	out = protowire.AppendTag(out, 3, protowire.BytesType)
	return protowire.AppendBytes(out, app)
}
