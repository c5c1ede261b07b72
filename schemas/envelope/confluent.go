package envelope

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// ContentTypeConfluent is the content-type header of a public record
// written in kafka.public_wire_format confluent: its value is framed
// (magic byte 0, big-endian uint32 schema id, the message indexes as a
// zig-zag varint count then zig-zag varints, a count of 0 meaning [0])
// before the protobuf message.
const ContentTypeConfluent = "application/x-protobuf; wire=confluent"

var contentTypeConfluent = []byte(ContentTypeConfluent)

// maxIndexes bounds the message indexes a reader accepts: a nesting depth
// no schema of ours comes near; more is a corrupt record.
const maxIndexes = 32

// Framing is how a writer frames the values of one message type on one
// topic. The zero Framing is plain: no prefix, the plain content type.
type Framing struct {
	// Prefix goes before the marshalled message (nil: plain).
	Prefix []byte
	// ContentType is the content-type header value (shared, never
	// modified).
	ContentType []byte
}

// Header is the content-type header value of f.
func (f Framing) Header() []byte {
	if f.ContentType == nil {
		return contentType
	}
	return f.ContentType
}

// Confluent is the framing of the message md under schema id.
func Confluent(id uint32, md protoreflect.MessageDescriptor) Framing {
	// Clipped: a writer appends its message to Prefix itself, which must
	// then copy it rather than write into the shared array.
	return Framing{Prefix: slices.Clip(AppendConfluentPrefix(nil, id, MessageIndex(md))), ContentType: contentTypeConfluent}
}

// AppendConfluentPrefix appends the Confluent framing of a message with
// schema id and message indexes index to b.
func AppendConfluentPrefix(b []byte, id uint32, index []int) []byte {
	b = append(b, 0)
	b = binary.BigEndian.AppendUint32(b, id)
	if len(index) == 1 && index[0] == 0 {
		return append(b, 0) // the common case's short form: count 0 means [0]
	}
	b = binary.AppendVarint(b, int64(len(index)))
	for _, i := range index {
		b = binary.AppendVarint(b, int64(i))
	}
	return b
}

// MessageIndex is md's path in its file: its index among the file's
// top-level messages, then among each enclosing message's nested ones.
func MessageIndex(md protoreflect.MessageDescriptor) []int {
	var rev []int
	for d := protoreflect.Descriptor(md); ; {
		rev = append(rev, d.Index())
		parent, ok := d.Parent().(protoreflect.MessageDescriptor)
		if !ok {
			break
		}
		d = parent
	}
	out := make([]int, len(rev))
	for i, v := range rev {
		out[len(rev)-1-i] = v
	}
	return out
}

// ErrFraming is a value that claims the Confluent framing (by its
// content-type or a leading 0) and does not hold it.
var ErrFraming = errors.New("bad confluent framing")

// Payload is r's protobuf message: r.Value, without the Confluent framing
// where r is framed. The content-type header decides when present
// (ContentTypeConfluent: framed; any other value, empty included: plain);
// without one a leading 0 byte means framed, since a protobuf message
// never starts with 0 (field number 0 is invalid). It never copies.
func Payload(r *kgo.Record) ([]byte, error) {
	for i := range r.Headers {
		if r.Headers[i].Key == HeaderContentType {
			if string(r.Headers[i].Value) == ContentTypeConfluent {
				_, _, msg, err := unframe(r.Value, false)
				return msg, err
			}
			return r.Value, nil
		}
	}
	if len(r.Value) > 0 && r.Value[0] == 0 {
		_, _, msg, err := unframe(r.Value, false)
		return msg, err
	}
	return r.Value, nil
}

// Unframe splits a framed value into its schema id, message indexes and
// message. Errors wrap ErrFraming.
func Unframe(v []byte) (id uint32, index []int, msg []byte, err error) {
	return unframe(v, true)
}

// unframe is Unframe; without keep it returns no indexes and allocates
// nothing (a reader's per-record path).
func unframe(v []byte, keep bool) (id uint32, index []int, msg []byte, err error) {
	if len(v) < 6 || v[0] != 0 {
		return 0, nil, nil, fmt.Errorf("%w: %d bytes, first %#x: want 0, a 4-byte id and the indexes", ErrFraming, len(v), first(v))
	}
	id, rest := binary.BigEndian.Uint32(v[1:5]), v[5:]
	n, w := binary.Varint(rest)
	if w <= 0 || n < 0 || n > maxIndexes {
		return 0, nil, nil, fmt.Errorf("%w: bad message index count", ErrFraming)
	}
	rest = rest[w:]
	if n == 0 {
		if keep {
			index = []int{0}
		}
		return id, index, rest, nil
	}
	if keep {
		index = make([]int, 0, n)
	}
	for i := range n {
		x, w := binary.Varint(rest)
		if w <= 0 || x < 0 {
			return 0, nil, nil, fmt.Errorf("%w: bad message index %d", ErrFraming, i)
		}
		if keep {
			index = append(index, int(x))
		}
		rest = rest[w:]
	}
	return id, index, rest, nil
}

func first(v []byte) byte {
	if len(v) == 0 {
		return 0
	}
	return v[0]
}
