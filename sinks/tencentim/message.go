package tencentim

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/hyapp/roomflow/schemas/envelope"
)

// Event types that are not pushed to IM (IM-6: no-op success, marked
// delivered so they never stay pending).
var noOpTypes = map[string]bool{
	"RoomCreated":     true,
	"RoomHeatChanged": true,
	"RoomRankChanged": true,
}

// IsNoOp reports whether eventType is not published to IM.
func IsNoOp(eventType string) bool { return noOpTypes[eventType] }

// highPriorityTypes are sent with MsgPriority High: Tencent drops messages
// over 40/s per group lowest priority first, and gifts and mic changes are
// what listeners must see.
var highPriorityTypes = map[string]bool{
	"RoomGiftSent":   true,
	"RoomMicChanged": true,
}

// Priority returns the MsgPriority for eventType.
func Priority(eventType string) string {
	if highPriorityTypes[eventType] {
		return "High"
	}
	return "Normal"
}

// RandomFor derives send_group_msg's Random from event_id: the first four
// bytes of SHA-256(event_id). Tencent drops a message with the same sender,
// group and Random (and content) within 5 minutes, so every resend of an
// event is absorbed as a duplicate.
func RandomFor(eventID string) uint32 {
	sum := sha256.Sum256([]byte(eventID))
	return binary.BigEndian.Uint32(sum[:4])
}

// Message is one prepared send_group_msg request. Body is fixed at build
// time so every retry sends the same bytes.
type Message struct {
	EventID   string
	EventType string
	RoomID    string
	GroupID   string
	Random    uint32
	Priority  string
	// Body is the JSON request body.
	Body []byte
	// Size is the message size checked against the limit: the encoded
	// MsgBody array (what Tencent counts), not the envelope around it.
	Size int
}

// PayloadError is an envelope whose payload does not decode as the message
// its event_type names. Permanent: the same bytes never decode.
type PayloadError struct {
	EventType string
	Err       error
}

func (e *PayloadError) Error() string {
	return fmt.Sprintf("tencentim: payload of %s does not decode: %v", e.EventType, e.Err)
}
func (e *PayloadError) Unwrap() error { return e.Err }

// eventData is the TIMCustomElem Data document clients parse.
type eventData struct {
	EventID      string          `json:"event_id"`
	EventType    string          `json:"event_type"`
	AppCode      string          `json:"app_code,omitempty"`
	RoomID       string          `json:"room_id"`
	RoomVersion  int64           `json:"room_version"`
	OccurredAtMs int64           `json:"occurred_at_ms"`
	Event        json.RawMessage `json:"event,omitempty"`
	// PayloadB64 carries the raw payload of event types this build does
	// not know, so new room-service events still reach clients.
	PayloadB64 []byte `json:"payload_b64,omitempty"`
}

type msgContent struct {
	Data string `json:"Data"`
	Desc string `json:"Desc"`
	Ext  string `json:"Ext"`
}

type msgElem struct {
	MsgType    string     `json:"MsgType"`
	MsgContent msgContent `json:"MsgContent"`
}

type sendGroupMsgReq struct {
	GroupID     string          `json:"GroupId"`
	Random      uint32          `json:"Random"`
	MsgPriority string          `json:"MsgPriority"`
	MsgBody     json.RawMessage `json:"MsgBody"`
}

var marshalOpts = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}

// BuildMessage turns an envelope into its send_group_msg request. The
// output is a pure function of the envelope and groupPrefix: protojson's
// deliberately unstable whitespace is compacted away, so a resend after a
// restart (even of another build) is byte-identical.
func BuildMessage(env *envelope.View, groupPrefix string) (*Message, error) {
	eventID, eventType, roomID := string(env.EventID), string(env.EventType), string(env.RoomID)
	d := eventData{
		EventID: eventID, EventType: eventType, AppCode: string(env.AppCode),
		RoomID: roomID, RoomVersion: env.RoomVersion, OccurredAtMs: env.OccurredAtMs,
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName("hyapp.room.v1." + eventType))
	if err == nil && eventType != "EventEnvelope" {
		m := mt.New().Interface()
		if err := proto.Unmarshal(env.Payload, m); err != nil {
			return nil, &PayloadError{EventType: eventType, Err: err}
		}
		js, err := marshalOpts.Marshal(m)
		if err != nil {
			return nil, &PayloadError{EventType: eventType, Err: err}
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, js); err != nil {
			return nil, &PayloadError{EventType: eventType, Err: err}
		}
		d.Event = buf.Bytes()
	} else if len(env.Payload) > 0 {
		d.PayloadB64 = env.Payload
	}
	data, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("tencentim: encode data: %w", err)
	}
	body, err := json.Marshal([]msgElem{{MsgType: "TIMCustomElem", MsgContent: msgContent{
		Data: string(data), Desc: eventType, Ext: eventID}}})
	if err != nil {
		return nil, fmt.Errorf("tencentim: encode body: %w", err)
	}
	m := &Message{
		EventID: eventID, EventType: eventType, RoomID: roomID,
		GroupID: groupPrefix + roomID, Random: RandomFor(eventID),
		Priority: Priority(eventType), Size: len(body),
	}
	m.Body, err = json.Marshal(sendGroupMsgReq{GroupID: m.GroupID, Random: m.Random, MsgPriority: m.Priority, MsgBody: body})
	if err != nil {
		return nil, fmt.Errorf("tencentim: encode request: %w", err)
	}
	return m, nil
}
