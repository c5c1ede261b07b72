package relay

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestPositionDecodesVersion2: testdata/position_v2.bin was written by the
// version 2 encoder (roomflow before relay.mode): high 1000050, clock
// 90000, holes 3 and 4 first seen at 1000, 7 and 900000 at 2000, 1000000 at
// 85000. It must still decode, as a poll-mode position, and re-encode to
// the same bytes.
func TestPositionDecodesVersion2(t *testing.T) {
	b, err := os.ReadFile("testdata/position_v2.bin")
	if err != nil {
		t.Fatal(err)
	}
	if b[0] != 2 {
		t.Fatalf("golden file has version %d", b[0])
	}
	p, err := DecodePosition(b)
	if err != nil {
		t.Fatal(err)
	}
	want := Position{High: 1_000_050, ClockMs: 90_000, Holes: []Hole{
		{ID: 3, FirstSeenMs: 1000}, {ID: 4, FirstSeenMs: 1000}, {ID: 7, FirstSeenMs: 2000},
		{ID: 900_000, FirstSeenMs: 2000}, {ID: 1_000_000, FirstSeenMs: 85_000},
	}}
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("decoded %+v, want %+v", p, want)
	}
	// A poll position is still written as version 2, byte for byte, so a
	// poll deployment can roll back to a relay that predates version 3.
	again := NewTracker(p, 100, time.Hour, time.Now()).Encode()
	if !reflect.DeepEqual(again, b) {
		t.Fatalf("re-encoded poll position % x, want the version 2 bytes % x", again, b)
	}
}

// TestPositionBinlogRoundTrip: a binlog position keeps its flavor, GTID
// set, file, offset and rows inside a transaction, together with the poll
// fallback (high-water id and holes), through the Tracker's encoding; a
// switch back to poll drops the binlog part and keeps the fallback.
func TestPositionBinlogRoundTrip(t *testing.T) {
	long := strings.Repeat("3E11FA47-71CA-11E1-9E33-C80AA9429562:1-99999,", 200)[:MaxGTIDSetBytes]
	for _, bp := range []BinlogPosition{
		{Flavor: FlavorMariaDB, GTIDSet: "0-1-42,1-2-7", File: "binlog.000003", Offset: 4711},
		{Flavor: FlavorMariaDB, GTIDSet: "0-1-42", File: "binlog.000003", Offset: 4711, Rows: 1500},
		{Flavor: FlavorMySQL, File: "binlog.000009", Offset: 1 << 40, Rows: 1},
		{Flavor: FlavorMySQL, GTIDSet: long, File: strings.Repeat("f", MaxBinlogFileBytes)},
	} {
		tr := NewTracker(Position{High: 50, ClockMs: 10, Holes: holes(3, 7, 8)}, 100, time.Hour, time.Now())
		if err := tr.SetBinlog(bp); err != nil {
			t.Fatal(err)
		}
		b := tr.Encode()
		got, err := DecodePosition(b)
		if err != nil {
			t.Fatalf("%+v: %v", bp, err)
		}
		want := Position{Mode: ModeBinlog, Binlog: bp, High: 50, ClockMs: 10, Holes: holes(3, 7, 8)}
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(tr.Position(), want) {
			t.Fatalf("decoded %+v, want %+v", got, want)
		}
		if !reflect.DeepEqual(EncodePosition(want), b) {
			t.Fatal("EncodePosition and Tracker.Encode differ")
		}
		if len(b) > MaxPositionBytes(2, time.Hour) {
			t.Fatalf("%d bytes above MaxPositionBytes %d", len(b), MaxPositionBytes(2, time.Hour))
		}
		tr.SetPoll()
		got, err = DecodePosition(tr.Encode())
		if err != nil || got.Mode == ModeBinlog || !got.Binlog.IsZero() || got.High != 50 || len(got.Holes) != 2 {
			t.Fatalf("after SetPoll: %+v, %v", got, err)
		}
	}
}

// TestPositionBinlogTooLarge: a GTID set or file name that would not fit
// is refused by SetBinlog, naming the part, and the position is unchanged.
func TestPositionBinlogTooLarge(t *testing.T) {
	tr := NewTracker(Position{High: 5}, 10, time.Hour, time.Now())
	for _, bp := range []BinlogPosition{
		{Flavor: FlavorMySQL, GTIDSet: strings.Repeat("x", MaxGTIDSetBytes+1)},
		{Flavor: FlavorMySQL, File: strings.Repeat("x", MaxBinlogFileBytes+1)},
	} {
		if err := tr.SetBinlog(bp); !errors.Is(err, ErrBinlogPositionTooLarge) {
			t.Fatalf("err = %v, want ErrBinlogPositionTooLarge", err)
		}
	}
	if p := tr.Position(); p.Mode == ModeBinlog {
		t.Fatalf("refused binlog position applied: %+v", p)
	}
}

// TestPositionV3Malformed: corrupt version 3 binlog parts are refused with
// ErrBadPosition, never read past the record or allocated from a length.
func TestPositionV3Malformed(t *testing.T) {
	valid := EncodePosition(Position{Mode: ModeBinlog, Binlog: BinlogPosition{Flavor: FlavorMariaDB, GTIDSet: "0-1-2", File: "b.1", Offset: 9}, High: 3})
	for name, b := range map[string][]byte{
		"no mode":         {3},
		"unknown mode":    {3, 7, 0, 0, 0},
		"unknown flavor":  {3, 1, 9, 0, 0, 0, 0, 0, 0, 0},
		"gtid past end":   {3, 1, 1, 50, 'a'},
		"gtid over limit": append([]byte{3, 1, 1, 0x81, 0x80, 0x01}, make([]byte, MaxGTIDSetBytes+10)...),
		"truncated":       valid[:len(valid)-1],
		"no poll part":    valid[:len(valid)-3],
	} {
		if _, err := DecodePosition(b); !errors.Is(err, ErrBadPosition) {
			t.Errorf("%s: err = %v, want ErrBadPosition", name, err)
		}
	}
}
