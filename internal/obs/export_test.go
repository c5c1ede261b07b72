package obs

import "time"

// SetIdleTimeout sets the servers' keep-alive idle timeout until the
// returned restore runs (tests: the real one is minutes).
func SetIdleTimeout(d time.Duration) (restore func()) {
	old := idleTimeout
	idleTimeout = d
	return func() { idleTimeout = old }
}
