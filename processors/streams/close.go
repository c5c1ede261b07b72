package streams

import (
	"context"
	"time"

	"github.com/hyapp/roomflow/internal/kafkax"
)

// closeBound is what is left of ShutdownTimeout for closing the client
// once shutdown began (the whole of it after a fatal error).
func (r *Runtime) closeBound() time.Duration {
	if r.stopBy.IsZero() {
		return r.cfg.ShutdownTimeout
	}
	return time.Until(r.stopBy)
}

// closeClient closes the session's client within closeBound: leaving the
// group may wait for a JoinGroup answer far longer (kafkax.CloseWithin).
func (r *Runtime) closeClient() {
	ctx, cancel := context.WithTimeout(context.Background(), r.closeBound())
	defer cancel()
	kafkax.CloseWithin(ctx, r.sess.Client(), r.log)
}
