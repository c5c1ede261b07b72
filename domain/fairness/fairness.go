// Package fairness is the commit-reveal randomness of lucky draws
// (docs/fairness.md): the random value a user recomputes from the day's
// revealed seed, the seed's commitment, the seed's encryption at rest and
// the days draws are grouped in. Pure: no clock, no I/O beyond
// crypto/rand for new seeds.
package fairness

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// Modes of a (app_code, day): where a draw's random value comes from.
const (
	ModeCrypto       = "crypto"        // crypto/rand, per draw
	ModeCommitReveal = "commit_reveal" // RandomPPM over the day's committed seed
)

// ValidMode reports a known mode.
func ValidMode(m string) bool { return m == ModeCrypto || m == ModeCommitReveal }

const (
	// SeedBytes is the size of a day's seed.
	SeedBytes = 32
	// MaxClientSeed is the most bytes of a user's client_seed.
	MaxClientSeed = 64
	// RejectFrom is where a 32-bit sample is rejected (redrawn with the
	// next counter): below it every ppm value is equally likely
	// (4,294,000,000 is a multiple of 1,000,000).
	RejectFrom = 4_294_000_000
	ppm        = 1_000_000
)

// Input is what a commit-reveal draw's random value depends on besides
// the seed: nothing the operator chooses per draw.
type Input struct {
	AppCode      string
	ClientSeed   string
	SenderUserID int64
	Nonce        int64 // the user's n-th draw of the app and day, from 1
}

// Message is the HMAC message of in at counter: app_code and client_seed
// each as a 2-byte big-endian length and its bytes, sender_user_id and
// nonce as 8-byte big-endian integers, counter as 4 bytes big-endian.
func Message(in Input, counter uint32) []byte {
	msg := make([]byte, 0, 2+len(in.AppCode)+2+len(in.ClientSeed)+8+8+4)
	msg = binary.BigEndian.AppendUint16(msg, uint16(len(in.AppCode)))
	msg = append(msg, in.AppCode...)
	msg = binary.BigEndian.AppendUint16(msg, uint16(len(in.ClientSeed)))
	msg = append(msg, in.ClientSeed...)
	msg = binary.BigEndian.AppendUint64(msg, uint64(in.SenderUserID))
	msg = binary.BigEndian.AppendUint64(msg, uint64(in.Nonce))
	return binary.BigEndian.AppendUint32(msg, counter)
}

// RandomPPM is the draw's value in [0, 1,000,000): for counter 0, 1, …
// the first 4 bytes (big-endian) of HMAC-SHA256(seed, Message(in,
// counter)); the first below RejectFrom, mod 1,000,000.
func RandomPPM(seed []byte, in Input) int64 {
	mac := hmac.New(sha256.New, seed)
	msg := Message(in, 0)
	var sum [sha256.Size]byte
	for counter := uint32(0); ; counter++ {
		binary.BigEndian.PutUint32(msg[len(msg)-4:], counter)
		mac.Reset()
		mac.Write(msg)
		v := binary.BigEndian.Uint32(mac.Sum(sum[:0]))
		if v < RejectFrom {
			return int64(v % ppm)
		}
	}
}

// Commitment is the published commitment of seed: hex SHA-256(seed).
func Commitment(seed []byte) string {
	h := sha256.Sum256(seed)
	return hex.EncodeToString(h[:])
}

// NewSeed is a fresh 32-byte seed from crypto/rand.
func NewSeed() ([]byte, error) {
	seed := make([]byte, SeedBytes)
	if _, err := rand.Read(seed); err != nil {
		return nil, fmt.Errorf("fairness: seed: %w", err)
	}
	return seed, nil
}

// ErrClientSeed is a client_seed longer than MaxClientSeed bytes or not
// valid UTF-8.
var ErrClientSeed = errors.New("client_seed must be valid UTF-8 of at most 64 bytes")

// CheckClientSeed returns ErrClientSeed for a client_seed no draw takes.
func CheckClientSeed(s string) error {
	if len(s) > MaxClientSeed || !utf8.ValidString(s) {
		return ErrClientSeed
	}
	return nil
}

// DayStartMs is the start (Unix ms) of the day of length dayLength
// containing atMs: UTC days for 24h, shorter days (demo, tests) counted
// from the Unix epoch.
func DayStartMs(atMs int64, dayLength time.Duration) int64 {
	l := dayLength.Milliseconds()
	d := atMs % l
	if d < 0 {
		d += l
	}
	return atMs - d
}

// DayLabel names the day starting at startMs: YYYY-MM-DD for 24h days,
// its RFC 3339 UTC start time for shorter ones.
func DayLabel(startMs int64, dayLength time.Duration) string {
	t := time.UnixMilli(startMs).UTC()
	if dayLength == 24*time.Hour {
		return t.Format(time.DateOnly)
	}
	return t.Format(time.RFC3339)
}

// ParseDay is the start (Unix ms) of the day a label names (YYYY-MM-DD,
// or for days shorter than 24h an RFC 3339 time on a day boundary).
func ParseDay(label string, dayLength time.Duration) (int64, error) {
	t, err := time.Parse(time.DateOnly, label)
	if err != nil {
		if t, err = time.Parse(time.RFC3339, label); err != nil {
			return 0, fmt.Errorf("day %q is neither YYYY-MM-DD nor an RFC 3339 time", label)
		}
	}
	ms := t.UnixMilli()
	if DayStartMs(ms, dayLength) != ms {
		return 0, fmt.Errorf("day %q does not start a day of %s", label, dayLength)
	}
	return ms, nil
}
