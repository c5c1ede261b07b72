package streams

import (
	"testing"
	"time"
)

// The runtime's retries wait between half the back-off and the back-off,
// spread over that range.
func TestRetryJitter(t *testing.T) {
	for _, b := range []time.Duration{100 * time.Millisecond, time.Second, 10 * time.Second} {
		lo, hi := b, time.Duration(0)
		for range 200 {
			d := retryJitter.Jitter(b)
			lo, hi = min(lo, d), max(hi, d)
		}
		if lo < b/2 || hi > b || hi-lo < b/4 {
			t.Fatalf("back-off %s: waits from %s to %s, want spread within [%s, %s]", b, lo, hi, b/2, b)
		}
	}
}
