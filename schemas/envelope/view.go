package envelope

import (
	"errors"
	"unicode/utf8"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
)

// Errors of the views besides protowire's parse errors.
var (
	ErrInvalidUTF8 = errors.New("envelope: string field contains invalid UTF-8")
	ErrFieldNumber = errors.New("envelope: invalid field number")
)

// View is an EventEnvelope whose fields alias the bytes it was parsed
// from (see the package doc).
type View struct {
	EventID, EventType, AppCode, RoomID []byte
	RequestID, CommandID                []byte
	Payload                             []byte
	RoomVersion, OccurredAtMs           int64
}

// Field numbers of the messages the views read (schemas/proto/hyapp/room/v1).
var (
	envelopeFields = fieldSet{strings: bits(1, 2, 3, 4, 7, 8), bytes: bits(9), varints: bits(5, 6)}
	micFields      = fieldSet{strings: bits(3, 4, 5, 6), varints: bits(1, 2, 7, 8, 9, 10)}
	giftFields     = fieldSet{strings: bits(3, 7, 9, 10), varints: bits(1, 2, 4, 5, 6, 8)}
	// ParseTrusted's: the strings read as bytes, without the UTF-8 check
	envelopeTrusted = envelopeFields.trusted()
	micTrusted      = micFields.trusted()
)

// Parse reads the EventEnvelope b into v.
func (v *View) Parse(b []byte) error { return v.parse(b, &envelopeFields) }

// ParseTrusted is Parse without the UTF-8 check of the string fields, for
// input a roomflow stage wrote after reading it with Parse (see the package
// doc, "Trusted input"): its strings are valid UTF-8 already. Everything
// else is checked as by Parse, so it never panics, whatever the input.
func (v *View) ParseTrusted(b []byte) error { return v.parse(b, &envelopeTrusted) }

func (v *View) parse(b []byte, set *fieldSet) error {
	var f fieldValues
	err := f.read(b, set)
	*v = View{EventID: f.b[1], EventType: f.b[2], AppCode: f.b[3], RoomID: f.b[4],
		RequestID: f.b[7], CommandID: f.b[8], Payload: f.b[9],
		RoomVersion: int64(f.x[5]), OccurredAtMs: int64(f.x[6])}
	return err
}

// MicChanged is a RoomMicChanged payload whose strings alias its input.
type MicChanged struct {
	UserID                 int64
	SeatNo, PreviousSeatNo int32
	Action, MicSessionID   []byte
	PublishState, Reason   []byte
	PublishDeadlineMs      int64
	PublishEventTimeMs     int64
	RTCStoppedAtMs         int64
}

// Parse reads the RoomMicChanged b into m.
func (m *MicChanged) Parse(b []byte) error { return m.parse(b, &micFields) }

// ParseTrusted is Parse without the UTF-8 check, like View.ParseTrusted.
func (m *MicChanged) ParseTrusted(b []byte) error { return m.parse(b, &micTrusted) }

func (m *MicChanged) parse(b []byte, set *fieldSet) error {
	var f fieldValues
	err := f.read(b, set)
	*m = MicChanged{UserID: int64(f.x[1]), SeatNo: int32(f.x[2]), PreviousSeatNo: int32(f.x[9]),
		Action: f.b[3], MicSessionID: f.b[4], PublishState: f.b[5], Reason: f.b[6],
		PublishDeadlineMs: int64(f.x[7]), PublishEventTimeMs: int64(f.x[8]), RTCStoppedAtMs: int64(f.x[10])}
	return err
}

// GiftSent is a RoomGiftSent payload whose strings alias its input.
type GiftSent struct {
	SenderUserID, TargetUserID int64
	GiftID                     []byte
	GiftCount                  int32
	CoinSpent, HeatValue       int64
	BillingReceiptID           []byte
	Lucky                      bool
	LuckyRuleVersion, DrawID   []byte
}

// Parse reads the RoomGiftSent b into g.
func (g *GiftSent) Parse(b []byte) error {
	var f fieldValues
	err := f.read(b, &giftFields)
	*g = GiftSent{SenderUserID: int64(f.x[1]), TargetUserID: int64(f.x[2]), GiftID: f.b[3],
		GiftCount: int32(f.x[4]), CoinSpent: int64(f.x[5]), HeatValue: int64(f.x[6]),
		BillingReceiptID: f.b[7], Lucky: f.x[8] != 0, LuckyRuleVersion: f.b[9], DrawID: f.b[10]}
	return err
}

// maxField bounds the field numbers a view reads (all below 16).
const maxField = 15

// fieldSet says which field numbers of a message are strings (UTF-8
// checked), bytes and varints (int32, int64, bool), one bit per number.
type fieldSet struct{ strings, bytes, varints uint16 }

// trusted is s with its strings read as bytes (no UTF-8 check).
func (s fieldSet) trusted() fieldSet {
	return fieldSet{bytes: s.strings | s.bytes, varints: s.varints}
}

func bits(nums ...int) uint16 {
	var m uint16
	for _, n := range nums {
		m |= 1 << n
	}
	return m
}

// fieldValues are the known fields of one message as read from the wire:
// b for length-delimited ones (aliasing the input), x for varints.
type fieldValues struct {
	b [maxField + 1][]byte
	x [maxField + 1]uint64
}

// read walks the message b: the fields set names are kept (the last
// occurrence wins), the rest, and known fields with an unexpected wire
// type, are skipped as unknown fields. It stops at the first error, with
// what was read before it kept.
func (f *fieldValues) read(b []byte, set *fieldSet) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		if num > protowire.MaxValidNumber { // proto.Unmarshal refuses these too
			return ErrFieldNumber
		}
		b = b[n:]
		var bit uint16
		if num <= maxField {
			bit = 1 << num
		}
		switch {
		case typ == protowire.BytesType && (set.strings|set.bytes)&bit != 0:
			val, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return protowire.ParseError(m)
			}
			b = b[m:]
			if set.strings&bit != 0 && !utf8.Valid(val) {
				return ErrInvalidUTF8
			}
			f.b[num] = val
		case typ == protowire.VarintType && set.varints&bit != 0:
			x, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return protowire.ParseError(m)
			}
			b = b[m:]
			f.x[num] = x
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

// String returns b as a string without copying: it is valid only while b
// is unchanged (a view's fields are, while the record value is).
func String(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
