package relay

import (
	"testing"
	"time"
)

// The leader retry waits at least what it always waited (half the
// session: a former leader learns from its heartbeats that it lost the
// group) and at most a quarter more, spread.
func TestLeaderRetryJitter(t *testing.T) {
	base := 15 * time.Second / 2
	seen := map[time.Duration]bool{}
	for range 200 {
		d := leaderRetryJitter.Jitter(base * 5 / 4)
		if d < base || d > base*5/4 {
			t.Fatalf("leader retry after %s, outside [%s, %s]", d, base, base*5/4)
		}
		seen[d] = true
	}
	if len(seen) < 50 {
		t.Fatalf("%d distinct waits in 200: not jittered", len(seen))
	}
}
