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

// Parse reads the EventEnvelope b into v; on error v holds what was read
// before it.
func (v *View) Parse(b []byte) error {
	*v = View{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		if num > protowire.MaxValidNumber { // proto.Unmarshal refuses these too
			return ErrFieldNumber
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
				return ErrInvalidUTF8
			}
			switch num {
			case 1:
				v.EventID = val
			case 2:
				v.EventType = val
			case 3:
				v.AppCode = val
			case 4:
				v.RoomID = val
			case 7:
				v.RequestID = val
			case 8:
				v.CommandID = val
			case 9:
				v.Payload = val
			}
		case typ == protowire.VarintType && (num == 5 || num == 6):
			x, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return protowire.ParseError(m)
			}
			b = b[m:]
			if num == 5 {
				v.RoomVersion = int64(x)
			} else {
				v.OccurredAtMs = int64(x)
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
func (m *MicChanged) Parse(b []byte) error {
	*m = MicChanged{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		if num > protowire.MaxValidNumber { // proto.Unmarshal refuses these too
			return ErrFieldNumber
		}
		b = b[n:]
		switch {
		case typ == protowire.BytesType && num >= 3 && num <= 6:
			val, k := protowire.ConsumeBytes(b)
			if k < 0 {
				return protowire.ParseError(k)
			}
			b = b[k:]
			if !utf8.Valid(val) {
				return ErrInvalidUTF8
			}
			switch num {
			case 3:
				m.Action = val
			case 4:
				m.MicSessionID = val
			case 5:
				m.PublishState = val
			case 6:
				m.Reason = val
			}
		case typ == protowire.VarintType && num >= 1 && num <= 10 && num != 3 && num != 4 && num != 5 && num != 6:
			x, k := protowire.ConsumeVarint(b)
			if k < 0 {
				return protowire.ParseError(k)
			}
			b = b[k:]
			switch num {
			case 1:
				m.UserID = int64(x)
			case 2:
				m.SeatNo = int32(x)
			case 7:
				m.PublishDeadlineMs = int64(x)
			case 8:
				m.PublishEventTimeMs = int64(x)
			case 9:
				m.PreviousSeatNo = int32(x)
			case 10:
				m.RTCStoppedAtMs = int64(x)
			}
		default:
			k := protowire.ConsumeFieldValue(num, typ, b)
			if k < 0 {
				return protowire.ParseError(k)
			}
			b = b[k:]
		}
	}
	return nil
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
	*g = GiftSent{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		if num > protowire.MaxValidNumber { // proto.Unmarshal refuses these too
			return ErrFieldNumber
		}
		b = b[n:]
		switch {
		case typ == protowire.BytesType && (num == 3 || num == 7 || num == 9 || num == 10):
			val, k := protowire.ConsumeBytes(b)
			if k < 0 {
				return protowire.ParseError(k)
			}
			b = b[k:]
			if !utf8.Valid(val) {
				return ErrInvalidUTF8
			}
			switch num {
			case 3:
				g.GiftID = val
			case 7:
				g.BillingReceiptID = val
			case 9:
				g.LuckyRuleVersion = val
			case 10:
				g.DrawID = val
			}
		case typ == protowire.VarintType && (num == 1 || num == 2 || num == 4 || num == 5 || num == 6 || num == 8):
			x, k := protowire.ConsumeVarint(b)
			if k < 0 {
				return protowire.ParseError(k)
			}
			b = b[k:]
			switch num {
			case 1:
				g.SenderUserID = int64(x)
			case 2:
				g.TargetUserID = int64(x)
			case 4:
				g.GiftCount = int32(x)
			case 5:
				g.CoinSpent = int64(x)
			case 6:
				g.HeatValue = int64(x)
			case 8:
				g.Lucky = x != 0
			}
		default:
			k := protowire.ConsumeFieldValue(num, typ, b)
			if k < 0 {
				return protowire.ParseError(k)
			}
			b = b[k:]
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
