package fairness

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"
)

// seed0 is the test seed 0x00, 0x01, … 0x1f.
func seed0() []byte {
	s := make([]byte, 32)
	for i := range s {
		s[i] = byte(i)
	}
	return s
}

// The vectors were computed by an independent implementation of the
// procedure in docs/fairness.md (Python's hmac module).
func TestRandomPPMVectors(t *testing.T) {
	for _, tc := range []struct {
		in   Input
		want int64
	}{
		{Input{AppCode: "hy", SenderUserID: 1, Nonce: 1}, 884179},
		{Input{AppCode: "hy", SenderUserID: 1, Nonce: 2}, 370060},
		{Input{AppCode: "hy", ClientSeed: "lucky-me", SenderUserID: 1, Nonce: 1}, 856497},
		{Input{AppCode: "hy", ClientSeed: "你好", SenderUserID: 42, Nonce: 7}, 196114},
		{Input{AppCode: "other", SenderUserID: 1<<63 - 1, Nonce: 1}, 229676},
		{Input{SenderUserID: 1, Nonce: 1}, 505605},
		// counter 0 gives a value >= RejectFrom: counter 1 decides.
		{Input{AppCode: "hy", SenderUserID: 5, Nonce: 3405}, 682121},
	} {
		if got := RandomPPM(seed0(), tc.in); got != tc.want {
			t.Errorf("RandomPPM(%+v) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestRandomPPMRejectsHighSamples(t *testing.T) {
	in := Input{AppCode: "hy", SenderUserID: 5, Nonce: 3405}
	mac := hmac.New(sha256.New, seed0())
	mac.Write(Message(in, 0))
	if v := binary.BigEndian.Uint32(mac.Sum(nil)); v < RejectFrom {
		t.Fatalf("counter 0 sample %d is below %d: the vector does not exercise rejection", v, RejectFrom)
	}
}

func TestMessageLayout(t *testing.T) {
	got := Message(Input{AppCode: "ab", ClientSeed: "c", SenderUserID: 258, Nonce: 3}, 7)
	want := []byte{0, 2, 'a', 'b', 0, 1, 'c', 0, 0, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 7}
	if !bytes.Equal(got, want) {
		t.Fatalf("Message = %v, want %v", got, want)
	}
}

func TestCommitment(t *testing.T) {
	if got := Commitment(seed0()); got != "630dcd2966c4336691125448bbb25b4ff412a49c732db2c8abc1b8581bd710dd" {
		t.Fatalf("Commitment = %s", got)
	}
}

func TestCheckClientSeed(t *testing.T) {
	for _, tc := range []struct {
		s  string
		ok bool
	}{
		{"", true}, {strings.Repeat("x", 64), true}, {strings.Repeat("é", 32), true},
		{strings.Repeat("x", 65), false}, {"\xff", false}, {"a\xc3", false},
	} {
		if err := CheckClientSeed(tc.s); (err == nil) != tc.ok || err != nil && !errors.Is(err, ErrClientSeed) {
			t.Errorf("CheckClientSeed(%q) = %v, want ok=%v", tc.s, err, tc.ok)
		}
	}
}

func TestDays(t *testing.T) {
	at := time.Date(2026, 12, 7, 13, 4, 5, 0, time.UTC).UnixMilli()
	day := DayStartMs(at, 24*time.Hour)
	if got := DayLabel(day, 24*time.Hour); got != "2026-12-07" {
		t.Errorf("DayLabel = %s", got)
	}
	if got, err := ParseDay("2026-12-07", 24*time.Hour); err != nil || got != day {
		t.Errorf("ParseDay = %d, %v; want %d", got, err, day)
	}
	short := DayStartMs(at, 2*time.Minute)
	if got := DayLabel(short, 2*time.Minute); got != "2026-12-07T13:04:00Z" {
		t.Errorf("short DayLabel = %s", got)
	}
	if got, err := ParseDay("2026-12-07T13:04:00Z", 2*time.Minute); err != nil || got != short {
		t.Errorf("short ParseDay = %d, %v", got, err)
	}
	for _, bad := range []string{"2026-12-07T13:05:00Z", "yesterday", "2026-13-01", ""} {
		if _, err := ParseDay(bad, 2*time.Minute); err == nil {
			t.Errorf("ParseDay(%q) accepted", bad)
		}
	}
	if _, err := ParseDay("2026-12-07T12:00:00Z", 24*time.Hour); err == nil {
		t.Error("ParseDay accepted a time inside a 24h day")
	}
	if got := DayStartMs(-1, time.Minute); got != -60000 {
		t.Errorf("DayStartMs(-1) = %d", got)
	}
}

func key(b byte) string { return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, 32)) }

func TestKeyringRotation(t *testing.T) {
	old, err := NewKeyring(key(1), nil)
	if err != nil {
		t.Fatal(err)
	}
	aad := AAD("hy", 86400000)
	sealed, err := old.Seal(seed0(), aad)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, seed0()) {
		t.Fatal("sealed seed contains the seed")
	}
	rotated, err := NewKeyring(key(2), []string{key(1)})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := rotated.Open(sealed, aad); err != nil || !bytes.Equal(got, seed0()) {
		t.Fatalf("rotated Open = %x, %v", got, err)
	}
	if _, err := rotated.Open(sealed, AAD("hy", 0)); !errors.Is(err, ErrUndecryptable) {
		t.Fatalf("Open under another day's aad = %v, want ErrUndecryptable", err)
	}
	dropped, _ := NewKeyring(key(2), nil)
	if _, err := dropped.Open(sealed, aad); !errors.Is(err, ErrUndecryptable) {
		t.Fatalf("Open without the old key = %v", err)
	}
	if _, err := dropped.Open([]byte{1, 2}, aad); !errors.Is(err, ErrUndecryptable) {
		t.Fatalf("Open of a short blob = %v", err)
	}
}

func TestKeyringBadKeys(t *testing.T) {
	secret := base64.StdEncoding.EncodeToString([]byte("sixteen byte key"))
	for _, tc := range []struct {
		cur  string
		old  []string
		name string
	}{
		{"", nil, "key"}, {"not base64!", nil, "key"}, {secret, nil, "key"}, {key(1), []string{key(2), secret}, "old_keys[1]"},
	} {
		_, err := NewKeyring(tc.cur, tc.old)
		if err == nil || !strings.HasPrefix(err.Error(), tc.name+":") || strings.Contains(err.Error(), secret) {
			t.Errorf("NewKeyring(%q, %v) = %v, want an error naming %s without the key", tc.cur, tc.old, err, tc.name)
		}
	}
}
