package imoutbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hyapp/roomflow/internal/backoff"
	"github.com/hyapp/roomflow/schemas/envelope"
	"github.com/hyapp/roomflow/sinks/tencentim"
)

// Sender is the IM side of delivery; *tencentim.Client implements it.
type Sender interface {
	CheckSize(m *tencentim.Message) error
	Pace(ctx context.Context, group string) error
	Deliver(ctx context.Context, m *tencentim.Message) (tencentim.Result, error)
}

// Service publishes claimed room_outbox rows to IM and records results.
type Service struct {
	repo   *Repo
	im     Sender
	cfg    ServiceConfig // defaults filled
	log    *slog.Logger
	fails  *failureLog
	m      *metrics
	worker string
	lanes  chan struct{} // rooms sending at once, shared by both paths

	inflightMu sync.Mutex
	inflight   map[int64]struct{} // claimed rows whose result is not yet recorded

	// share, when set (a Publisher), limits the compensation scan to the
	// rooms of the partitions this replica's fast path owns (see share).
	// nil: the scan claims any room.
	share *share

	// afterSend, when set (tests), runs after a successful send and before
	// the result is recorded; an error simulates a crash in between.
	afterSend func(eventID string) error
}

// NewService returns a service on repo sending with im (nil when nothing
// is delivered) from cfg (defaults filled, see ServiceConfig). worker_id is
// node_id plus a random suffix, so two processes sharing a node id never
// share claims.
func NewService(cfg ServiceConfig, repo *Repo, im Sender) (*Service, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	node := cfg.NodeID
	if node == "" {
		node, _ = os.Hostname()
	}
	if len(node) > 48 {
		// Whole characters only: MySQL refuses (1366) a worker_id cut
		// inside one at every claim.
		node = strings.ToValidUTF8(node[:48], "")
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	s := &Service{repo: repo, im: im, cfg: cfg, m: newMetrics(cfg.Registerer), worker: node + "-" + hex.EncodeToString(b[:]),
		lanes: make(chan struct{}, cfg.Lanes), inflight: map[int64]struct{}{}}
	s.log = cfg.Logger.With("worker", "room_outbox", "node_id", node, "worker_id", s.worker)
	s.fails = newFailureLog(s.log)
	return s, nil
}

// lifetime is the contexts delivery runs under. run ending stops intake:
// no new claim, no new send. sends ends a little before DrainTimeout has
// passed since then and cancels the sends still in flight: their rows stay
// delivering for lock expiry (whether IM got them is unknown), and the
// rows queued behind them are released. abort ends at DrainTimeout and
// stops recording. So a stop never outlasts shutdown.timeout, and the frame
// closes MySQL only after it.
type lifetime struct{ run, sends, abort context.Context }

// newLifetime derives the lifetime of ctx; release frees it.
func (s *Service) newLifetime(ctx context.Context) (lt lifetime, release func()) {
	abort, cancelAbort := context.WithCancel(context.WithoutCancel(ctx))
	sends, cancelSends := context.WithCancel(abort)
	grace := s.cfg.DrainTimeout
	reserve := min(grace/4, 2*time.Second) // for recording what the cancelled sends leave
	stop := context.AfterFunc(ctx, func() {
		time.AfterFunc(grace-reserve, cancelSends)
		time.AfterFunc(grace, cancelAbort)
	})
	return lifetime{run: ctx, sends: sends, abort: abort}, func() { stop(); cancelAbort() }
}

// until is lt whose run also ends when ctx does (a fast path room chain
// whose partition is given up); stop frees it.
func (lt lifetime) until(ctx context.Context) (_ lifetime, stop func()) {
	run, cancel := context.WithCancel(lt.run)
	unhook := context.AfterFunc(ctx, cancel)
	return lifetime{run: run, sends: lt.sends, abort: lt.abort}, func() { unhook(); cancel() }
}

// WorkerID is the value this service writes to room_outbox.worker_id.
func (s *Service) WorkerID() string { return s.worker }

// SetAfterSend installs a hook between a successful send and recording it
// (crash tests: return an error to drop the result as a crash would).
func (s *Service) SetAfterSend(f func(eventID string) error) { s.afterSend = f }

// job is one claimed row with its envelope, decoded once: by the fast
// path from the Kafka record, by the scan from room_outbox.payload (the
// view aliases those bytes). decodeErr is set when they do not decode.
type job struct {
	row       Row
	env       envelope.View
	decodeErr error
}

// scanJob decodes a row the compensation scan claimed.
func scanJob(row Row) job {
	j := job{row: row}
	j.decodeErr = j.env.Parse(row.Payload)
	return j
}

type outcome struct {
	delivered []int64
	failed    []Failure
	released  []Row
	errs      []error
	lost      []int64 // not recorded: sends aborted at shutdown, or dropped by the afterSend hook (a simulated crash)
}

// deliver publishes jobs, rooms in parallel (at most Lanes at once), each
// room's jobs in order, and records each result as soon as it is known
// (with whatever else ended meanwhile, see collect), so a room whose send
// hangs for PublishTimeout never holds up the marks of the others. lt.run
// ending stops new sends (unsent rows are released); a send in flight
// finishes within PublishTimeout and its result is recorded, unless
// lt.abort ends first.
func (s *Service) deliver(lt lifetime, source string, jobs []job) error {
	var order []string
	byRoom := map[string][]job{}
	for _, j := range jobs {
		if _, ok := byRoom[j.row.RoomID]; !ok {
			order = append(order, j.row.RoomID)
		}
		byRoom[j.row.RoomID] = append(byRoom[j.row.RoomID], j)
	}
	results := make(chan *outcome, len(jobs))
	go func() {
		var wg sync.WaitGroup
		for _, room := range order {
			s.lanes <- struct{}{}
			wg.Go(func() {
				defer func() { <-s.lanes }()
				var mu sync.Mutex
				for _, j := range byRoom[room] {
					out := &outcome{}
					s.one(lt, source, j, &mu, out)
					results <- out
				}
			})
		}
		wg.Wait()
		close(results)
	}()
	var errs []error
	for first := range results {
		var all outcome
		for _, out := range collect(first, results) {
			all.merge(out)
		}
		if err := s.record(lt, source, &all); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// recordWindow is how long a recorder waits for more results to join the
// first one in a statement, and recordMax how many it takes at most.
const (
	recordWindow = 5 * time.Millisecond
	recordMax    = 1000
)

// collect returns first and whatever else arrives on results within
// recordWindow (at most recordMax, none after results is closed): results
// that end together are recorded in one set of statements.
func collect[T any](first T, results <-chan T) []T {
	batch := []T{first}
	timeout := time.After(recordWindow)
	for len(batch) < recordMax {
		select {
		case r, ok := <-results:
			if !ok {
				return batch
			}
			batch = append(batch, r)
		case <-timeout:
			return batch
		}
	}
	return batch
}

// merge appends p's results to o.
func (o *outcome) merge(p *outcome) {
	o.delivered = append(o.delivered, p.delivered...)
	o.failed = append(o.failed, p.failed...)
	o.released = append(o.released, p.released...)
	o.errs = append(o.errs, p.errs...)
	o.lost = append(o.lost, p.lost...)
}

func (s *Service) one(lt lifetime, source string, j job, mu *sync.Mutex, out *outcome) {
	row := j.row
	add := func(f func()) { mu.Lock(); f(); mu.Unlock() }
	if lt.run.Err() != nil {
		add(func() { out.released = append(out.released, row) })
		return
	}
	env := j.env
	if err := j.decodeErr; err != nil {
		s.m.decodeErrors.Inc()
		e := fmt.Errorf("envelope decode failed for event %s: %v", row.EventID, err)
		add(func() {
			out.errs = append(out.errs, e)
			out.failed = append(out.failed, Failure{ID: row.ID, Error: "decode: " + err.Error(), Failed: s.cfg.MarkPermanentFailed})
		})
		status := StatusRetryable
		if s.cfg.MarkPermanentFailed {
			status = StatusFailed
		}
		s.m.events.WithLabelValues(source, status).Inc()
		s.m.retries.WithLabelValues("decode").Inc()
		s.fails.failed(row, source, status, "decode", e)
		return
	}
	if len(env.AppCode) == 0 {
		env.AppCode = []byte(s.cfg.AppCode)
	}
	if tencentim.IsNoOp(string(env.EventType)) {
		s.m.events.WithLabelValues(source, "noop").Inc()
		add(func() { out.delivered = append(out.delivered, row.ID) })
		return
	}
	msg, err := tencentim.BuildMessage(&env, s.cfg.GroupIDPrefix)
	if err == nil {
		err = s.im.CheckSize(msg)
	}
	if err == nil {
		if err = s.im.Pace(lt.run, msg.GroupID); errors.Is(err, tencentim.ErrNotSent) {
			add(func() { out.released = append(out.released, row) })
			return
		}
	}
	if err == nil {
		cctx, cancel := context.WithTimeout(lt.sends, s.cfg.PublishTimeout)
		_, err = s.im.Deliver(cctx, msg)
		cancel()
		if err != nil && lt.sends.Err() != nil {
			// Shutdown ran out of time: whether IM got it is unknown, so the
			// row stays delivering; after lock_until_ms it is sent again with
			// the same Random (deduplicated by IM).
			s.m.events.WithLabelValues(source, "abandoned").Inc()
			add(func() { out.lost = append(out.lost, row.ID) })
			s.log.Warn("send still in flight at the end of shutdown.timeout cancelled; row left delivering until its lock expires", "source", source,
				"event_id", row.EventID, "event_type", row.EventType, "room_id", row.RoomID, "status", StatusDelivering)
			return
		}
		if err == nil && env.OccurredAtMs > 0 {
			s.m.lag.Observe(time.Since(time.UnixMilli(env.OccurredAtMs)).Seconds())
		}
	}
	if err == nil {
		if s.afterSend != nil {
			if herr := s.afterSend(row.EventID); herr != nil {
				add(func() { out.lost = append(out.lost, row.ID) })
				return
			}
		}
		s.m.events.WithLabelValues(source, "delivered").Inc()
		add(func() { out.delivered = append(out.delivered, row.ID) })
		s.log.Debug("im publish delivered", "source", source, "event_id", row.EventID, "event_type", row.EventType,
			"room_id", row.RoomID, "retry_count", row.RetryCount, "status", StatusDelivered)
		return
	}
	class, code := tencentim.Classification(err)
	failed := class == tencentim.Permanent && s.cfg.MarkPermanentFailed
	status := StatusRetryable
	if failed {
		status = StatusFailed
	}
	s.m.events.WithLabelValues(source, status).Inc()
	s.m.retries.WithLabelValues(code).Inc()
	add(func() {
		out.failed = append(out.failed, Failure{ID: row.ID, Error: shortError(class, code, err), Failed: failed})
	})
	s.fails.failed(row, source, status, code, err)
}

// shortError is last_error: class, code and the scrubbed message.
func shortError(class tencentim.Class, code string, err error) string {
	msg := strings.TrimPrefix(err.Error(), "tencentim: ")
	return envelope.Clip(fmt.Sprintf("%s %s: %s", class, code, msg), 300)
}

// claimed notes rows as in flight: RunLockRenewer keeps their claims alive
// until their results are recorded.
func (s *Service) claimed(rows ...Row) {
	s.inflightMu.Lock()
	defer s.inflightMu.Unlock()
	for _, r := range rows {
		s.inflight[r.ID] = struct{}{}
	}
}

func (s *Service) forget(ids ...[]int64) {
	s.inflightMu.Lock()
	defer s.inflightMu.Unlock()
	for _, l := range ids {
		for _, id := range l {
			delete(s.inflight, id)
		}
	}
}

// record writes the batch's results, each call bounded by DrainTimeout, after
// lt.run ended too, until lt.abort (MySQL is closed only after this
// returns), retrying a failed statement a few times. Rows whose result still
// cannot be written stay delivering and are no longer renewed: their claims
// expire and the compensation scan sends them again (absorbed by Tencent's
// dedup).
func (s *Service) record(lt lifetime, source string, out *outcome) error {
	ctx, cancel := context.WithTimeout(lt.abort, s.cfg.DrainTimeout)
	defer cancel()
	failedIDs := make([]int64, len(out.failed))
	for i, f := range out.failed {
		failedIDs[i] = f.ID
	}
	releasedIDs := make([]int64, len(out.released))
	for i, r := range out.released {
		releasedIDs[i] = r.ID
	}
	defer s.forget(out.delivered, failedIDs, releasedIDs, out.lost)
	retry := func(op string, f func() error) error {
		var err error
		for attempt := 0; attempt < 3; attempt++ {
			if err = f(); err == nil {
				return nil
			}
			s.m.batchErrors.WithLabelValues(op).Inc()
			select {
			case <-ctx.Done():
				return err
			case <-time.After(retryJitter.Jitter(time.Duration(attempt+1) * 200 * time.Millisecond)):
			}
		}
		return err
	}
	errs := out.errs
	if err := retry("mark", func() error { return s.repo.MarkDelivered(ctx, out.delivered) }); err != nil {
		errs = append(errs, err)
	}
	if err := retry("mark", func() error { return s.repo.MarkFailed(ctx, s.worker, out.failed) }); err != nil {
		errs = append(errs, err)
	}
	if len(out.released) > 0 {
		s.m.events.WithLabelValues(source, "released").Add(float64(len(out.released)))
		if err := retry("release", func() error { return s.repo.Release(ctx, s.worker, out.released) }); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// retryJitter spreads retries of failed statements (marks, the fast path's
// claim) over the upper half of each wait, so replicas that failed together
// (a MySQL failover) do not retry in step.
var retryJitter = backoff.MustNew(backoff.Config{JitterFraction: 0.5})

// ProcessPendingOutbox is one compensation round (IM-4): claim up to
// BatchSize eligible rows, publish each bounded by PublishTimeout (one
// failure never stops the batch), record each result as it ends. It returns the round's
// errors (claim, mark, envelope decode) joined; rows stay in the table.
// After ctx ends the round claims and sends nothing new and returns within
// DrainTimeout, cancelling sends still in flight then (rows left delivering).
//
// In a Publisher the round only claims rows of the rooms whose partition
// this replica's fast path owns (none while it owns none), and stops
// claiming and sending when partitions are given up; see share.
func (s *Service) ProcessPendingOutbox(ctx context.Context) error {
	var keep func(room string) bool
	spread := 1
	if s.share != nil {
		if keep, spread = s.share.scope(); keep == nil {
			return nil // owns no room: another replica's scan claims them
		}
		var cancel context.CancelFunc
		ctx, cancel = s.share.roundContext(ctx)
		defer cancel()
	}
	lt, release := s.newLifetime(ctx)
	defer release()
	return s.processPending(lt, keep, spread)
}

func (s *Service) processPending(lt lifetime, keep func(room string) bool, spread int) error {
	ctx := lt.run
	if ctx.Err() != nil {
		return nil
	}
	rows, err := s.repo.ClaimPendingOf(ctx, s.worker, s.cfg.BatchSize, s.cfg.ClaimGrace, s.cfg.LockTTL, keep, spread)
	if err != nil {
		s.m.batchErrors.WithLabelValues("claim").Inc()
		return err
	}
	s.claimed(rows...)
	s.m.claimBatch.WithLabelValues("scan").Observe(float64(len(rows)))
	s.m.claims.WithLabelValues("scan", "claimed").Add(float64(len(rows)))
	if len(rows) == 0 {
		return nil
	}
	jobs := make([]job, len(rows))
	for i, r := range rows {
		jobs[i] = scanJob(r)
	}
	return s.deliver(lt, "scan", jobs)
}

// RunOutboxWorker runs ProcessPendingOutbox at once and then every
// PollInterval until ctx ends (IM-9). After cancel it starts no new
// round; the round in flight ends as ProcessPendingOutbox describes.
func (s *Service) RunOutboxWorker(ctx context.Context) {
	tick := time.NewTicker(s.cfg.PollInterval)
	defer tick.Stop()
	for {
		if err := s.ProcessPendingOutbox(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("outbox compensation round failed", "error", err.Error())
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// RunLockRenewer extends this worker's claims every lock_ttl/3 until ctx
// ends, so work that waits long for pacing (a busy room, a backlog) is not
// taken over and sent twice while this process is alive.
func (s *Service) RunLockRenewer(ctx context.Context) {
	tick := time.NewTicker(s.cfg.LockTTL / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s.inflightMu.Lock()
		ids := make([]int64, 0, len(s.inflight))
		for id := range s.inflight {
			ids = append(ids, id)
		}
		s.inflightMu.Unlock()
		if _, err := s.repo.RenewLocks(ctx, s.worker, ids, s.cfg.LockTTL); err != nil && ctx.Err() == nil {
			s.m.batchErrors.WithLabelValues("renew").Inc()
			s.log.Warn("claim renewal failed", "error", err.Error())
		}
	}
}

// RunGauges refreshes the backlog gauges every interval until ctx ends.
func (s *Service) RunGauges(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if b, err := s.repo.Backlog(ctx); err == nil {
			for st, n := range b.ByStatus {
				s.m.pending.WithLabelValues(st).Set(float64(n))
			}
			age := 0.0
			if b.OldestMs > 0 {
				age = max(0, time.Since(time.UnixMilli(b.OldestMs)).Seconds())
			}
			s.m.oldestAge.Set(age)
		} else if ctx.Err() == nil {
			s.log.Warn("outbox backlog query failed", "error", err.Error())
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
