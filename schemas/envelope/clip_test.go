package envelope_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/hyapp/roomflow/schemas/envelope"
)

func TestClip(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{
		{"abc", 5, "abc"},
		{"abc", 3, "abc"},
		{"abcd", 3, "abc"},
		{"abc", 0, ""},
		{"x群组", 2, "x"}, // 群 is 3 bytes: not split
		{"x群组", 4, "x群"},
		{"x群组", 6, "x群"},
		{"x群组", 7, "x群组"},
	} {
		if got := envelope.Clip(c.s, c.n); got != c.want {
			t.Errorf("Clip(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
	}
	long := "x" + strings.Repeat("群组不存在", 10)
	for n := range len(long) + 2 {
		got := envelope.Clip(long, n)
		if len(got) > n || !utf8.ValidString(got) || !strings.HasPrefix(long, got) || len(got) < n-3 {
			t.Fatalf("Clip(long, %d) = %q (%d bytes)", n, got, len(got))
		}
	}
}
