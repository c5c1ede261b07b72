package mysqlsink

import (
	"testing"
	"time"
)

// A batch or claim retry waits between half its ceiling and the ceiling
// (20ms doubling to 2s), spread so sinks that failed together part.
func TestRetryDelayJitter(t *testing.T) {
	for attempt, want := range []time.Duration{20 * time.Millisecond, 40 * time.Millisecond, 80 * time.Millisecond} {
		if c := retryCeiling(attempt); c != want {
			t.Fatalf("retryCeiling(%d) = %s, want %s", attempt, c, want)
		}
	}
	if c := retryCeiling(20); c != 2*time.Second {
		t.Fatalf("retryCeiling(20) = %s, want the 2s cap", c)
	}
	for attempt := 0; attempt < 10; attempt++ {
		c := retryCeiling(attempt)
		seen := map[time.Duration]bool{}
		for range 50 {
			d := retryDelay(attempt)
			if d < c/2 || d > c {
				t.Fatalf("retryDelay(%d) = %s outside [%s, %s]", attempt, d, c/2, c)
			}
			seen[d] = true
		}
		if len(seen) < 10 {
			t.Fatalf("retryDelay(%d): %d distinct waits in 50, not jittered", attempt, len(seen))
		}
	}
}
