package streams

import (
	"bytes"
	"errors"
	"os"
	"testing"

	"github.com/hyapp/roomflow/schemas/envelope"
)

// TestChangelogValuesOfThePreviousRelease decodes changelog values captured
// from the previous release's encoder (testdata) and checks this release
// still writes those bytes, which that release reads.
func TestChangelogValuesOfThePreviousRelease(t *testing.T) {
	for file, want := range map[string]entry{
		"changelog-v1-expiring.bin": {value: []byte("session state"), expiresMs: 1764547200000},
		"changelog-v1.bin":          {value: []byte("day rooms")},
		"changelog-v1-empty.bin":    {value: []byte{}},
	} {
		b, err := os.ReadFile("testdata/" + file)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeChangelogValue(b)
		if err != nil || !bytes.Equal(got.value, want.value) || got.value == nil || got.expiresMs != want.expiresMs {
			t.Errorf("%s: %+v (error %v), want %+v", file, got, err, want)
		}
		if !bytes.Equal(encodeChangelogValue(want), b) {
			t.Errorf("%s: this release writes other bytes", file)
		}
	}
}

// TestChangelogValueOfANewerVersionIsRefused: a higher version byte is a
// *envelope.VersionError naming it, and the restore stops on it.
func TestChangelogValueOfANewerVersionIsRefused(t *testing.T) {
	b := encodeChangelogValue(entry{value: []byte("x")})
	b[0] = changelogVersion + 1
	_, err := decodeChangelogValue(b)
	var ve *envelope.VersionError
	if !errors.As(err, &ve) || ve.Version != 2 || ve.Newest != 1 || !errors.Is(err, envelope.ErrNewerVersion) {
		t.Fatalf("error %v, want a VersionError for version 2", err)
	}
	s := newStore((&fakeClock{}).now)
	if err := s.restoreRecord([]byte("k"), b, 0); !errors.Is(err, envelope.ErrNewerVersion) {
		t.Fatalf("restore: %v", err)
	}
	if _, err := decodeChangelogValue([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0}); !errors.Is(err, errChangelogValue) {
		t.Fatalf("version 0: %v", err)
	}
}
