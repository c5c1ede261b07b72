package streams

import "github.com/twmb/franz-go/pkg/kgo"

// txnArena is memory that lives exactly as long as the open transaction:
// the records, headers, keys and values a processor emits (Task.NewRecord,
// Task.NewHeaders, Task.Bytes) and the runtime's changelog records.
//
// Why: a transaction produces thousands of short-lived records, and
// allocating each from the heap makes the garbage collector a large share
// of a processor's CPU. kgo holds an emitted record only until its promise
// has run; once GroupTransactSession.End returns without error, Flush (on
// commit) or AbortBufferedRecords (on abort) has waited for every record of
// the transaction, so nothing references the arena any more and the
// runtime reuses it for the next transaction. If End fails, the runtime
// stops and the arena is never reused.
//
// The arena keeps the chunks the last transaction used and frees the rest,
// so its size follows the recent transaction size.
type txnArena struct {
	recs  slab[kgo.Record]
	hdrs  slab[kgo.RecordHeader]
	bytes ByteArena
}

func newTxnArena() *txnArena {
	return &txnArena{
		recs:  slab[kgo.Record]{size: 256},
		hdrs:  slab[kgo.RecordHeader]{size: 1024},
		bytes: ByteArena{size: 64 << 10},
	}
}

// reset makes all memory reusable. Only call it once nothing (kgo, the
// processor) references the memory handed out.
func (a *txnArena) reset() {
	a.recs.reset()
	a.hdrs.reset()
	a.bytes.reset()
}

// slab hands out zeroed runs of T from fixed-size chunks.
type slab[T any] struct {
	size   int
	chunks [][]T
	ci     int // current chunk
	off    int // next free element of chunks[ci]
}

func (s *slab[T]) take(n int) []T {
	if n > s.size/4 {
		return make([]T, n) // large: from the heap
	}
	for {
		if s.ci < len(s.chunks) {
			c := s.chunks[s.ci]
			if s.off+n <= len(c) {
				out := c[s.off : s.off+n : s.off+n]
				s.off += n
				return out
			}
			s.ci++
			s.off = 0
			continue
		}
		s.chunks = append(s.chunks, make([]T, s.size))
	}
}

// reset zeroes the used chunks (dropping their references) and frees the
// chunks the last transaction did not use.
func (s *slab[T]) reset() {
	used := min(s.ci+1, len(s.chunks))
	for i := 0; i < used; i++ {
		clear(s.chunks[i])
	}
	clear(s.chunks[used:])
	s.chunks = s.chunks[:used]
	s.ci, s.off = 0, 0
}

// ByteArena hands out byte buffers from fixed-size chunks of the open
// transaction's arena (Task.Bytes). Contents are not zeroed: buffers are
// handed out empty, for appending. It is a concrete type, not a Task
// method, so that the closure passed to Append stays on the caller's stack
// (through an interface method it would escape: one allocation per call).
type ByteArena struct {
	size   int
	chunks [][]byte
	ci     int
	off    int
}

// Append returns fn(buf) where buf is an empty slice of the arena with room
// for at least hint bytes; the bytes fn appended stay reserved, with the
// lifetime of Task.NewRecord: use it for the keys, values and header values
// of emitted records. fn must only append to its argument and return the
// result (as the protobuf and strconv Append functions do); if it outgrows
// buf, its result is on the heap, which is correct, only slower. The
// result's capacity equals its length, so appending to it later never
// overwrites other arena bytes.
func (s *ByteArena) Append(hint int, fn func(buf []byte) []byte) []byte {
	hint = max(hint, 1)
	if hint > s.size/4 {
		return fn(make([]byte, 0, hint))
	}
	buf := s.room(hint)
	out := fn(buf)
	if cap(out) > 0 && cap(buf) > 0 && &out[:1][0] == &buf[:1][0] {
		s.off += len(out)
	}
	return out[:len(out):len(out)]
}

// copyString returns a copy of v in the arena.
func (s *ByteArena) copyString(v string) []byte {
	if len(v) > s.size/4 {
		return []byte(v)
	}
	buf := s.room(len(v))
	out := append(buf, v...)
	s.off += len(out)
	return out[:len(out):len(out)]
}

// room returns the free rest of the current chunk if it holds at least n
// bytes, else of a fresh chunk.
func (s *ByteArena) room(n int) []byte {
	for {
		if s.ci < len(s.chunks) {
			c := s.chunks[s.ci]
			if s.off+n <= len(c) {
				return c[s.off:s.off]
			}
			s.ci++
			s.off = 0
			continue
		}
		s.chunks = append(s.chunks, make([]byte, s.size))
	}
}

func (s *ByteArena) reset() {
	used := min(s.ci+1, len(s.chunks))
	clear(s.chunks[used:])
	s.chunks = s.chunks[:used]
	s.ci, s.off = 0, 0
}
