package relay

import (
	"encoding/binary"
	"errors"
	"math"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Exact tests of the position size arithmetic (issue 21): MaxPositionBytes
// against the largest position that really encodes, maxUvarintSum against
// an exhaustive search, MaxOpenGapsFor at a limit its bound meets exactly.

// widestUvarints returns n values summing to at most total whose uvarints
// take the most bytes, found by trying every combination of lengths; each
// value is the smallest of its length (0, 128, 128^2, ...).
func widestUvarints(n int, total *big.Int) []uint64 {
	var best []uint64
	bestBytes := -1
	lens := make([]int, n) // length - 1
	for {
		vs, sum, bytes := make([]uint64, n), new(big.Int), 0
		for i, l := range lens {
			if l > 0 {
				vs[i] = 1 << (7 * l)
			}
			sum.Add(sum, new(big.Int).SetUint64(vs[i]))
			bytes += l + 1
		}
		if sum.Cmp(total) <= 0 && bytes > bestBytes {
			best, bestBytes = vs, bytes
		}
		i := 0
		for ; i < n && lens[i] == binary.MaxVarintLen64-1; i++ {
			lens[i] = 0
		}
		if i == n {
			return best
		}
		lens[i]++
	}
}

func uvarintBytes(vs []uint64) int {
	n := 0
	for _, v := range vs {
		n += len(binary.AppendUvarint(nil, v))
	}
	return n
}

// TestMaxUvarintSumMatchesExhaustive: maxUvarintSum is the exact maximum
// plus its one byte of float slack, at and one below every length's
// threshold, for totals past what ten-byte uvarints can use, and for the
// id total MaxPositionBytes passes.
func TestMaxUvarintSumMatchesExhaustive(t *testing.T) {
	totals := []float64{0, 1, 1e30, 2*math.MaxUint64 + 4}
	for l := 1; l < binary.MaxVarintLen64; l++ {
		v := math.Ldexp(1, 7*l)
		totals = append(totals, v-1, v, v+1, 2*v-1, 2*v, 3*v-1, 3*v+math.Ldexp(1, 7*(l-1)))
	}
	for n := range 4 {
		for _, total := range totals {
			bt, _ := new(big.Float).SetFloat64(total).Int(nil)
			if got, want := maxUvarintSum(uint64(n), total), uvarintBytes(widestUvarints(n, bt))+1; got != want {
				t.Errorf("maxUvarintSum(%d, %g) = %d, want %d", n, total, got, want)
			}
		}
	}
}

// worstPosition is the largest position with n <= 3 holes, none older
// than maxAge: binlog mode with the longest GTID set and file, every
// number at its largest, each hole its own range with an id token of ten
// bytes (ids 2^62 apart: tokens 2^63), the oldest hole exactly maxAge old
// and the others' time deltas the widest that sum to at most maxAge.
func worstPosition(t *testing.T, n int, maxAge time.Duration) Position {
	t.Helper()
	p := Position{Mode: ModeBinlog, Binlog: BinlogPosition{Flavor: FlavorMySQL,
		GTIDSet: strings.Repeat("g", MaxGTIDSetBytes), File: strings.Repeat("f", MaxBinlogFileBytes),
		Offset: math.MaxUint64, Rows: math.MaxUint64}, High: math.MaxUint64, ClockMs: math.MaxInt64}
	seen := p.ClockMs - maxAge.Milliseconds()
	deltas := append([]uint64{0}, widestUvarints(n-1, big.NewInt(maxAge.Milliseconds()))...)
	for i := range n {
		seen += int64(deltas[i])
		p.Holes = append(p.Holes, Hole{ID: uint64(i+1) << 62, FirstSeenMs: seen})
	}
	got, err := DecodePosition(EncodePosition(p))
	if err != nil || len(got.Holes) != n {
		t.Fatalf("worst position of %d holes does not decode: %v", n, err)
	}
	return p
}

// TestMaxPositionBytesExactWorstCase: for 1 to 3 holes (where every id
// token can take ten bytes) MaxPositionBytes exceeds the largest position
// that really encodes by exactly its documented slack, so a looser bound
// (which would lower the accepted relay.max_open_gaps) fails as surely as
// one that is too small.
func TestMaxPositionBytesExactWorstCase(t *testing.T) {
	// The slack: 23 bytes of the binlog allowance (a flavor name where a
	// byte is written, and two of its four ten-byte varints are string
	// lengths of 2 bytes), 10 of the header's three ten-byte varints (the
	// clock, at most MaxInt64, takes 9, the range count 1), 1 of the first
	// hole's absolute time (at most MaxInt64) and maxUvarintSum's rounding
	// byte for the ids and for the times.
	const slack = 23 + 10 + 1 + 2
	for _, maxAge := range []time.Duration{0, time.Millisecond, 127 * time.Millisecond, 128 * time.Millisecond,
		300 * time.Millisecond, time.Minute, time.Hour} {
		for n := 1; n <= 3; n++ {
			worst := len(EncodePosition(worstPosition(t, n, maxAge)))
			if got := MaxPositionBytes(n, maxAge); got != worst+slack {
				t.Errorf("MaxPositionBytes(%d, %s) = %d, want the worst case %d + %d", n, maxAge, got, worst, slack)
			}
		}
	}
	if MaxPositionBytes(-1, time.Hour) != MaxPositionBytes(0, time.Hour) {
		t.Error("a negative gap count is not bounded as zero")
	}
}

// widestIDTokens is the most bytes the id tokens of n holes, each its own
// range, take: tokens are 2*delta with deltas of at least 1 summing to at
// most 2^64-1, so (lengthening tokens a byte at a time, cheapest first) it
// counts exactly, in integers, what maxUvarintSum bounds in float64.
func widestIDTokens(n uint64) int {
	budget := new(big.Int).SetUint64(math.MaxUint64 - n) // a delta of 1 each: one byte
	bytes, k, prev := n, n, big.NewInt(1)
	for l := 1; l < binary.MaxVarintLen64 && k > 0; l++ {
		delta := new(big.Int).Lsh(big.NewInt(1), uint(7*l-1)) // the smallest of a token of l+1 bytes
		cost := new(big.Int).Sub(delta, prev)
		prev = delta
		if q := new(big.Int).Quo(budget, cost); q.IsUint64() {
			k = min(k, q.Uint64())
		}
		budget.Sub(budget, new(big.Int).Mul(cost, new(big.Int).SetUint64(k)))
		bytes += k
	}
	return int(bytes)
}

// TestMaxPositionBytesIDsWithinTwoBytes: past three holes the id part of
// the bound is one or two bytes above the exact worst case (its rounding
// byte, and the flag bits and single-byte tokens it over-counts), for
// every count up to 30000 and a sample up to maxDecodedHoles.
func TestMaxPositionBytesIDsWithinTwoBytes(t *testing.T) {
	for n := uint64(4); n <= maxDecodedHoles; n += 1 + n/30_000*997 {
		bound, worst := maxUvarintSum(n, 2*math.MaxUint64+float64(n)), widestIDTokens(n)
		if bound < worst+1 || bound > worst+2 {
			t.Fatalf("%d holes: ids bounded by %d bytes, the worst case is %d", n, bound, worst)
		}
	}
}

// TestPositionValueLimitFitsOneMiB: the limit leaves recordOverhead bytes
// next to the longest key the relay writes to its offsets topic (the probe
// key), and that covers the real framing of a lone record in a batch.
func TestPositionValueLimitFitsOneMiB(t *testing.T) {
	for _, name := range []string{"r", "roomflow-relay", strings.Repeat("n", 249)} {
		key := name + probeSuffix
		limit := positionValueLimit(name)
		if got := len(key) + limit + recordOverhead; got != 1<<20 {
			t.Errorf("%q: key %d + limit %d + overhead %d = %d, want 1 MiB", name, len(key), limit, recordOverhead, got)
		}
		rec := (&kmsg.Record{Key: []byte(key), Value: make([]byte, limit)}).AppendTo(nil)
		body := len(rec) - 1 // AppendTo wrote a zero Length varint
		const batchHeader = 61
		if framed := batchHeader + len(binary.AppendVarint(nil, int64(body))) + body; framed > 1<<20 {
			t.Errorf("%q: a lone position record of %d bytes takes %d bytes in its batch, above 1 MiB", name, limit, framed)
		}
	}
}

// TestMaxOpenGapsForIsLargestFitting: MaxOpenGapsFor is the largest gap
// count whose bound fits the limit, also for a relay name whose limit
// equals a bound exactly (that count fits: the limit is inclusive).
func TestMaxOpenGapsForIsLargestFitting(t *testing.T) {
	exact := 0
	for l := 1; l <= 64; l++ {
		name := strings.Repeat("r", l)
		limit := positionValueLimit(name)
		g := MaxOpenGapsFor(name, time.Hour)
		if MaxPositionBytes(g, time.Hour) > limit || MaxPositionBytes(g+1, time.Hour) <= limit {
			t.Fatalf("%d-byte name: MaxOpenGapsFor = %d, bounds %d and %d around the limit %d", l, g,
				MaxPositionBytes(g, time.Hour), MaxPositionBytes(g+1, time.Hour), limit)
		}
		if MaxPositionBytes(g, time.Hour) == limit {
			exact++
		}
	}
	if exact == 0 {
		t.Fatal("no name length puts a bound exactly at the limit; the inclusive case is untested")
	}
}

// TestPositionV1RefusesHoleZero: a version 1 record whose first hole is
// id 0 (never an AUTO_INCREMENT id) is malformed, as in version 2; were it
// accepted, the relay would re-encode it as a version 2 position that does
// not decode, and the next leader could not restore it.
func TestPositionV1RefusesHoleZero(t *testing.T) {
	if _, err := DecodePosition([]byte{positionVersion1, 5, 1, 0, 0}); !errors.Is(err, ErrBadPosition) {
		t.Fatalf("version 1 with hole 0: err %v, want ErrBadPosition", err)
	}
	if _, err := DecodePosition(EncodePosition(Position{High: 5, Holes: []Hole{{ID: 0}}})); !errors.Is(err, ErrBadPosition) {
		t.Fatalf("version 2 with hole 0: err %v, want ErrBadPosition", err)
	}
	p, err := DecodePosition([]byte{positionVersion1, 5, 2, 1, 0, 3, 0})
	if err != nil || len(p.Holes) != 2 || p.Holes[0].ID != 1 || p.Holes[1].ID != 4 {
		t.Fatalf("version 1 holes 1 and 4: %+v, %v", p, err)
	}
}

// TestPositionV3DecodeAtItsLimits: every flavor byte decodes to its name
// and the first byte past them is refused (not an index out of range); a
// GTID set and a file name of exactly their limits decode, one byte more
// is refused.
func TestPositionV3DecodeAtItsLimits(t *testing.T) {
	binlogPart := func(flavor byte, gtid, file int) []byte {
		b := []byte{positionVersion, modeByteBinlog, flavor}
		b = append(binary.AppendUvarint(b, uint64(gtid)), strings.Repeat("g", gtid)...)
		b = append(binary.AppendUvarint(b, uint64(file)), strings.Repeat("f", file)...)
		return append(b, 4, 0, 9, 0, 0) // offset 4, rows 0, high 9, clock 0, no ranges
	}
	for f, want := range flavorBytes {
		p, err := DecodePosition(binlogPart(byte(f), 1, 1))
		if err != nil || p.Binlog.Flavor != want || p.Mode != ModeBinlog || p.Binlog.Offset != 4 || p.High != 9 {
			t.Errorf("flavor byte %d: %+v, %v; want flavor %q", f, p, err, want)
		}
	}
	if _, err := DecodePosition(binlogPart(byte(len(flavorBytes)), 1, 1)); !errors.Is(err, ErrBadPosition) {
		t.Errorf("flavor byte %d: err %v, want ErrBadPosition", len(flavorBytes), err)
	}
	if p, err := DecodePosition(binlogPart(1, MaxGTIDSetBytes, MaxBinlogFileBytes)); err != nil ||
		len(p.Binlog.GTIDSet) != MaxGTIDSetBytes || len(p.Binlog.File) != MaxBinlogFileBytes {
		t.Errorf("GTID set and file at their limits: %v", err)
	}
	for name, b := range map[string][]byte{
		"GTID set 1 byte over": binlogPart(1, MaxGTIDSetBytes+1, 1),
		"file 1 byte over":     binlogPart(1, 1, MaxBinlogFileBytes+1),
	} {
		if _, err := DecodePosition(b); !errors.Is(err, ErrBadPosition) {
			t.Errorf("%s: err %v, want ErrBadPosition", name, err)
		}
	}
}
