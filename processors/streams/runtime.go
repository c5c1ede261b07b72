package streams

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/kafkax"

	"github.com/hyapp/roomflow/internal/backoff"
)

// Runtime runs one Processor over a consumer group with Kafka transactions.
// Create it with New and call Run once.
//
// It is a single processing loop (Kafka Streams' StreamThread) over named
// parts, each with its own state: the transaction (txn), what the group
// assigned (assignment: events and tasks), the restorer, the punctuator and
// the stall tracker. What can fail, and how Run reports it: see Run.
type Runtime struct {
	shared
	proc     Processor
	txn      txn
	group    assignment
	restorer restorer
	punct    punctuator
	stalls   stallTracker

	ready      atomic.Bool
	refused    atomic.Pointer[error] // the group refusal Run ended on (kafkax.GroupRefused)
	killOnce   sync.Once
	sessReady  chan struct{} // closed once the session exists
	sessCloser sync.Once
	// stopBy is the end of ShutdownTimeout, set when shutdown begins.
	stopBy time.Time
}

// shared is what every part of one runtime reads: its name, configuration,
// metrics and logger, Run's context and the session once Run has
// connected, and whether Kill was called. It holds no part's state.
type shared struct {
	name   string
	cfg    Config
	m      *metrics
	log    *slog.Logger
	ctx    context.Context // Run's
	sess   *kgo.GroupTransactSession
	adm    *kadm.Client
	killed atomic.Bool
	// watch tells a producer-only commit franz-go ended as an abort
	// (kafkax.CommitWatch): punctuation output, the restore marker.
	watch *kafkax.CommitWatch
}

func (sh *shared) client() *kgo.Client { return sh.sess.Client() }

// New validates cfg (with its defaults applied, see Config) and returns
// a runtime running proc under cfg.Name. It does not connect. A
// configuration error is keyed by Config's field names (cfgerr).
func New(cfg Config, proc Processor) (*Runtime, error) {
	if proc == nil {
		return nil, errors.New("runtime: nil processor")
	}
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Punctuations = slices.Clone(cfg.Punctuations)
	r := &Runtime{proc: proc, sessReady: make(chan struct{})}
	r.shared = shared{
		name: cfg.Name,
		cfg:  cfg,
		m:    newMetrics(cfg.Registerer),
		log:  cfg.Logger.With("component", "processor", "processor", cfg.Name),
	}
	sh := &r.shared
	r.txn.init(sh)
	r.group.init(sh)
	r.restorer.init(sh)
	r.stalls.init(sh)
	r.punct.init(sh, &r.txn, &r.stalls)
	r.m.precreate(cfg.Name, cfg.RejectReasons)
	return r, nil
}

// Ready is nil once Run has connected and entered its processing loop and
// while no partition is being restored, until the broker refused the
// group for good; use it as a readiness check.
func (r *Runtime) Ready() error {
	if err := r.refused.Load(); err != nil {
		return *err
	}
	if n := r.restorer.pending(); n > 0 {
		return fmt.Errorf("runtime %s: restoring %d partitions", r.name, n)
	}
	if r.ready.Load() {
		return nil
	}
	return errors.New("runtime " + r.name + ": not ready")
}

// Assigned returns the input partitions whose tasks are restored and
// running, in no particular order. Safe for concurrent use.
func (r *Runtime) Assigned() []int32 { return r.group.published() }

// Kill closes the Kafka client at once without ending the open
// transaction, as a crash would: the broker aborts that transaction when an
// instance with the same transactional id starts, or after the transaction
// timeout. Run then returns ErrKilled. It exists for crash tests and for
// callers that must stop without committing.
func (r *Runtime) Kill() {
	r.killed.Store(true)
	r.killOnce.Do(func() {
		go func() {
			<-r.sessReady
			// Leaving the group (instead of waiting for the session
			// timeout) only makes the takeover fast; the transaction
			// is left open, as in a crash.
			r.client().Close()
		}()
	})
}

// Run consumes, processes and commits until ctx is cancelled (it then
// commits the open transaction within ShutdownTimeout, or aborts it, leaves
// the group and returns nil) or a fatal error occurs (*TxnError,
// *RestoreError, ErrKilled, *kafkax.GroupRefusedError, a configuration
// mismatch such as a changelog with fewer partitions than the input).
func (r *Runtime) Run(ctx context.Context) error {
	r.shared.ctx = ctx
	if err := r.start(); err != nil {
		return err
	}
	defer r.closeSession()

	if err := r.checkTopics(ctx); err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return nil // stopped before it consumed anything
		}
		return err
	}
	lagCtx, stopLag := context.WithCancel(ctx)
	defer stopLag()
	if r.cfg.LagInterval > 0 {
		go r.lagLoop(lagCtx)
	}

	err := r.loop(ctx)
	if r.killed.Load() {
		return ErrKilled
	}
	return err
}

// retryJitter spreads the runtime's retries (a stalled record or
// punctuation, a failed commit, the restore's marker transaction, the
// topic check) over the upper half of each backoff, so the processors and
// partitions that failed together (a broker or MySQL outage) do not retry
// in step: a retry waits between half the backoff and the backoff, which
// doubles from RetryBackoffMin to RetryBackoffMax as before.
var retryJitter = backoff.MustNew(backoff.Config{JitterFraction: 0.5})
