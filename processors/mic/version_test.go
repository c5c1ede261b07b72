package mic_test

import (
	"bytes"
	"errors"
	"os"
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/processors/mic"
	"github.com/hyapp/roomflow/schemas/envelope"
	"github.com/hyapp/roomflow/schemas/userv1"
)

func golden(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/state-v1/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestStateValuesOfThePreviousRelease decodes the state values and the
// ledger entry captured from the encoder of the release before state
// versions (testdata/state-v1), and checks this release still writes the
// same bytes, which that release reads (rolling upgrades run both).
func TestStateValuesOfThePreviousRelease(t *testing.T) {
	for name, want := range goldenSessions() {
		b := golden(t, name+".bin")
		var got mic.Session
		if err := got.UnmarshalBinary(b); err != nil || got != want {
			t.Errorf("%s: decoded %+v (error %v), want %+v", name, got, err, want)
		}
		p, err := mic.PeekTimer(b)
		if err != nil || p.Status != want.Status || p.SeatStartedAtMs != want.SeatStartedAtMs ||
			p.PublishingStartedAtMs != want.PublishingStartedAtMs || p.EndedAtMs != want.EndedAtMs {
			t.Errorf("%s: PeekTimer %+v (error %v)", name, p, err)
		}
		if !bytes.Equal(want.AppendBinary(nil), b) {
			t.Errorf("%s: this release writes other bytes than version 1", name)
		}
	}
	b := golden(t, "day-rooms.bin")
	if d, err := mic.UnmarshalDayRooms(b); err != nil || !reflect.DeepEqual(d, goldenDayRooms) {
		t.Errorf("day rooms %v (error %v), want %v", d, err, goldenDayRooms)
	}
	if !bytes.Equal(goldenDayRooms.AppendBinary(nil), b) {
		t.Error("day rooms: this release writes other bytes than version 1")
	}
	b = golden(t, "watermark.bin")
	if got := mic.DecodeWatermark(b); got != goldenWatermark || !bytes.Equal(mic.EncodeWatermark(goldenWatermark), b) {
		t.Errorf("watermark %d, want %d", got, goldenWatermark)
	}
	b = golden(t, "ledger.bin")
	var l userv1.MicLedgerEntry
	if err := proto.Unmarshal(b, &l); err != nil || !proto.Equal(&l, goldenLedger()) {
		t.Errorf("ledger entry %v (error %v), want %v", &l, err, goldenLedger())
	}
	if !bytes.Equal(mic.AppendLedgerEntry(nil, goldenLedger()), b) {
		t.Error("ledger entry: this release writes other bytes")
	}
}

// TestStateValueOfANewerVersionIsRefused: a value with a version prefix
// above 1 is a *envelope.VersionError (not corrupt, never guessed at); a
// prefix no version uses is corrupt.
func TestStateValueOfANewerVersionIsRefused(t *testing.T) {
	s := goldenSessions()["session-open"]
	open := s.AppendBinary(nil)
	rooms := goldenDayRooms.AppendBinary(nil)
	decoders := map[string]func([]byte) error{
		"session":   func(b []byte) error { var s mic.Session; return s.UnmarshalBinary(b) },
		"alias":     func(b []byte) error { var s mic.Session; return s.UnmarshalBinaryAlias(b) },
		"peek":      func(b []byte) error { _, err := mic.PeekTimer(b); return err },
		"day-rooms": func(b []byte) error { _, err := mic.UnmarshalDayRooms(b); return err },
	}
	for name, decode := range decoders {
		body := open
		if name == "day-rooms" {
			body = rooms
		}
		for _, v := range []byte{2, 7} {
			err := decode(append([]byte{v}, body...))
			var ve *envelope.VersionError
			if !errors.Is(err, envelope.ErrNewerVersion) || !errors.As(err, &ve) || ve.Version != int(v) || ve.Newest != 1 ||
				errors.Is(err, mic.ErrCorruptState) {
				t.Errorf("%s, version %d: error %v, want a VersionError", name, v, err)
			}
		}
		for _, v := range []byte{0, 1} {
			if err := decode(append([]byte{v}, body...)); !errors.Is(err, mic.ErrCorruptState) {
				t.Errorf("%s, leading byte %d: error %v, want ErrCorruptState", name, v, err)
			}
		}
		if err := decode(nil); err != nil {
			t.Errorf("%s: an empty value is version 1: %v", name, err)
		}
	}
}
