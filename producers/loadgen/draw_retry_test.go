package loadgen

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// An Unavailable answer (a draw timeout) is asked again, as the service
// says to, up to unavailableAttempts; any other error is returned at once.
func TestRetryUnavailable(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name      string
		failures  int
		code      codes.Code
		wantCalls int
		wantErr   bool
	}{
		{"answered after two timeouts", 2, codes.Unavailable, 3, false},
		{"unavailable every time", 99, codes.Unavailable, unavailableAttempts, true},
		{"invalid argument is not retried", 99, codes.InvalidArgument, 1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			calls := 0
			v, err := retryUnavailable(ctx, func() (int, error) {
				calls++
				if calls <= c.failures {
					// Wrapped as DrawGift's calls wrap it.
					return 0, fmt.Errorf("loadgen: draw x: %w", status.Error(c.code, "no"))
				}
				return 42, nil
			})
			if calls != c.wantCalls || (err != nil) != c.wantErr || (err == nil && v != 42) {
				t.Fatalf("%d calls, value %d, error %v; want %d calls, error %v", calls, v, err, c.wantCalls, c.wantErr)
			}
		})
	}
}
