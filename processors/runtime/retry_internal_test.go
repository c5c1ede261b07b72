package runtime

import (
	"testing"
	"time"
)

// The runtime's retries wait between half the back-off and the back-off.
func TestRetryJitter(t *testing.T) {
	for _, b := range []time.Duration{100 * time.Millisecond, time.Second, 10 * time.Second} {
		seen := map[time.Duration]bool{}
		for range 100 {
			d := retryJitter.Jitter(b)
			if d < b/2 || d > b {
				t.Fatalf("wait %s for back-off %s, outside [%s, %s]", d, b, b/2, b)
			}
			seen[d] = true
		}
		if len(seen) < 20 {
			t.Fatalf("back-off %s: %d distinct waits in 100", b, len(seen))
		}
	}
}
