// Package srtest is the Schema Registry side of tests: a registry fake
// (franz-go's srfake) holding the public topics' schemas, and a reader of
// the Confluent framing written from its definition, independent of
// schemas/envelope, to check writers with besides pkg/sr's serde.
package srtest

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/schemareg"
)

// Registry starts a registry fake (closed with t) with the public topics
// of topics registered, and returns its URL and the schema ids a writer
// looks up (topic name -> id).
func Registry(t testing.TB, topics config.Topics) (string, map[string]int) {
	t.Helper()
	fake := srfake.New()
	t.Cleanup(fake.Close)
	cl, err := schemareg.New(config.SchemaRegistryConfig{URL: fake.URL()}, schemareg.Builtin())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Register(context.Background(), topics.Public()); err != nil {
		t.Fatal(err)
	}
	ids, err := cl.Lookup(context.Background(), topics.Public())
	if err != nil {
		t.Fatal(err)
	}
	return fake.URL(), ids
}

// ReadFraming splits a framed value: magic 0, big-endian uint32 id, zig-zag
// varint index count (0 meaning [0]), zig-zag varint indexes, the message.
func ReadFraming(t testing.TB, v []byte) (id int, index []int, msg []byte) {
	t.Helper()
	if len(v) < 6 || v[0] != 0 {
		t.Fatalf("not framed: % x", v[:min(len(v), 8)])
	}
	id, v = int(binary.BigEndian.Uint32(v[1:5])), v[5:]
	zigzag := func() int {
		var u uint64
		for shift := 0; ; shift += 7 {
			if len(v) == 0 {
				t.Fatal("framing: truncated varint")
			}
			b := v[0]
			v = v[1:]
			u |= uint64(b&0x7f) << shift
			if b < 0x80 {
				return int(int64(u>>1) ^ -int64(u&1))
			}
		}
	}
	n := zigzag()
	if n == 0 {
		return id, []int{0}, v
	}
	index = make([]int, n)
	for i := range index {
		index[i] = zigzag()
	}
	return id, index, v
}

// Decode checks that value is out's message framed under id with its
// message index, decoding it both with ReadFraming and with pkg/sr's
// serde (which must agree), into out; it returns the message's bytes.
func Decode(t testing.TB, value []byte, id int, out proto.Message) []byte {
	t.Helper()
	md := out.ProtoReflect().Descriptor()
	gotID, index, msg := ReadFraming(t, value)
	if gotID != id || !sameIndex(index, md) {
		t.Fatalf("%s framed as id %d index %v, want id %d and its index in %s", md.FullName(), gotID, index, id, md.ParentFile().Path())
	}
	var serde sr.Serde
	serde.Register(id, out, sr.Index(index...),
		sr.DecodeFn(func(b []byte, v any) error { return proto.Unmarshal(b, v.(proto.Message)) }))
	if err := serde.Decode(value, out); err != nil {
		t.Fatalf("serde decode of %s: %v", md.FullName(), err)
	}
	hand := out.ProtoReflect().New().Interface()
	if err := proto.Unmarshal(msg, hand); err != nil || !proto.Equal(hand, out) {
		t.Fatalf("%s: the hand reader and the serde disagree (%v)", md.FullName(), err)
	}
	return msg
}

func sameIndex(index []int, md protoreflect.MessageDescriptor) bool {
	var want []int
	for d := protoreflect.Descriptor(md); ; d = d.Parent() {
		if _, ok := d.(protoreflect.MessageDescriptor); !ok {
			break
		}
		want = append([]int{d.Index()}, want...)
	}
	if len(index) != len(want) {
		return false
	}
	for i := range want {
		if index[i] != want[i] {
			return false
		}
	}
	return true
}
