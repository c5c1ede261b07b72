package luckyoutbox

import (
	"fmt"

	"github.com/hyapp/roomflow/internal/schemareg"
	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/schemas/envelope"
)

// eventFramings is the framing of every message of lucky_events.proto on
// topic, by message name (an outbox row's message_type), read from the
// file's descriptor so a message added there is framed too; nil in plain
// mode.
func eventFramings(f schemareg.Frames, topic string) (map[string]envelope.Framing, error) {
	if !f.Confluent() {
		return nil, nil
	}
	msgs := activityv1.File_hyapp_activity_v1_lucky_events_proto.Messages()
	out := make(map[string]envelope.Framing, msgs.Len())
	for i := range msgs.Len() {
		md := msgs.Get(i)
		fr, err := f.For(topic, md)
		if err != nil {
			return nil, err
		}
		out[string(md.Name())] = fr
	}
	return out, nil
}

var plainContentType = envelope.Framing{}.Header()

// frame is r's record value and content-type: the stored payload in plain
// mode; in confluent mode the payload after its message's framing, framed
// at publish time (the outbox keeps plain bytes, so a switch of
// kafka.public_wire_format applies to rows already written). A message
// type outside lucky_events.proto is an error there, never sent plain.
func (w *Worker) frame(r *row) (value, contentType []byte, err error) {
	if w.framings == nil {
		return r.Payload, plainContentType, nil
	}
	f, ok := w.framings[r.MessageType]
	if !ok {
		return nil, nil, fmt.Errorf("luckyoutbox: message type %q is not in lucky_events.proto: no schema to frame it with", r.MessageType)
	}
	return append(f.Prefix, r.Payload...), f.Header(), nil // Prefix is clipped: append copies
}
