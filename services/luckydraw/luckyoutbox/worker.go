// Package luckyoutbox delivers what the draw transaction (LUCKY-7) leaves
// in lucky_outbox: wallet credits of rewards (event_type reward_credit) and
// lucky events for Kafka (activity_event). It is the worker of `roomflow
// lucky` and the synchronous credit the draw service calls after commit.
//
// Claims. Each poll takes up to BatchSize due rows of each table (pending with
// next_retry_at_ms <= now, or processing with an expired lock_until_ms: a
// crashed worker's) with SELECT ... FOR UPDATE SKIP LOCKED in a short READ
// COMMITTED transaction, setting status processing, worker_id and
// lock_until_ms = now + LockTTL; the work happens outside it. Two workers
// never take the same row while its lock holds.
//
// Rewards. A claimed reward_credit row calls WalletService.CreditLuckyReward
// with its stored request (the same reward_id every time, so the wallet
// pays once and answers the same receipt), bounded by WalletCreditTimeout.
// Success commits in one transaction: the row done, the draw's
// reward_status granted with credit_receipt_id (only from pending or
// failed), and a LuckyRewardGranted:{reward_id} event row. A failure or
// timeout commits retry_count+1, last_error (short), status pending and
// next_retry_at_ms = now + Backoff(attempt), with a
// LuckyRewardPending:{reward_id}:{attempt} event; the MaxRetries-th failure
// makes the row and the draw's reward_status failed instead (metric
// roomflow_lucky_reward_failed_total, an ERROR line, a LuckyRewardPending
// event with failed=true); nothing is ever deleted, and RetryFailedTx re-drives
// failed rewards. While wallet_credit_dispatch is off (DispatchEnabled) a
// claimed reward is handed back untouched, due again after PollInterval:
// nothing is called, no attempt counted.
//
// Events. Claimed activity_event rows, and the events of claimed
// lucky_draw_events rows (lucky.outbox_format draw_events: one row per
// draw; a row that cannot be decoded is failed with the reason, never
// produced; the row is done once all its events are, else retried whole),
// are produced together to Topic (key
// kafka_key, value payload as stored, headers event_id, event_type =
// message_type, app_code, content-type) by an idempotent producer, and the
// produced ones are marked done in one statement; a failed produce is
// retried with Backoff, never given up (a Kafka outage must not lose
// events). Delivery is at least once: a crash between the produce and the
// mark, or a claim that expires meanwhile, sends the event again; consumers
// dedupe by event_id (the design's rule). Retries do not keep the order of
// one key's events.
//
// Synchronous credit. CreditRewards takes the rewards of one committed
// draw batch, claimed for this worker by the draw's own transaction for
// 2*wallet_credit_timeout+1s (or, pending, claimed then with a
// conditional UPDATE, whether due or not); a row it cannot claim answers
// the draw's current reward_status. It uses a draw's claim only while the
// lease left covers its wallet calls plus recordAllowance, so the poll
// that takes the claim once it lapses never calls the wallet for a reward
// whose synchronous call is still in flight; a group that waited too long
// for its turn leaves its rewards to that poll. Recording a failure
// checks the lease it claimed, not only the worker id the two paths
// share. The batch's credits share one claim read and one grant
// transaction.
package luckyoutbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/internal/backoff"
	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/sqlbuild"
	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/schemas/envelope"
	"github.com/hyapp/roomflow/schemas/walletv1"
	"github.com/hyapp/roomflow/services/luckydraw/wallet"
)

// Component names the worker in logs and Kafka client ids.
const Component = "lucky-outbox"

// settleTimeout bounds recording an outcome: it runs on a context detached
// from the caller's, so a cancelled RPC or a stopping worker still records
// a credit the wallet made.
const settleTimeout = 5 * time.Second

// backlogInterval is how often Run refreshes the backlog gauge.
const backlogInterval = 10 * time.Second

// Wallet credits rewards; *wallet.Client is the real one.
type Wallet interface {
	Credit(ctx context.Context, req *walletv1.CreditLuckyRewardRequest) (*walletv1.CreditLuckyRewardResponse, error)
}

// Worker is the lucky_outbox worker and synchronous credit. It is safe for
// concurrent use.
type Worker struct {
	cfg      Config
	db       *sql.DB
	wallet   Wallet
	producer *kgo.Client
	owned    bool // producer built by New, closed by Close
	backoff  *backoff.Backoff
	groups   chan struct{} // synchronous credit groups in flight
	mu       sync.Mutex
	waiting  map[string]*waitingGroup // by app_code: the group the next turn runs
	m        *metrics
	log      *slog.Logger
	framings map[string]envelope.Framing // by message type; nil: plain
}

// New returns a worker on db (migration 0006's lucky_outbox and
// lucky_draw_records, 0014's lucky_draw_events) crediting through w. It fails on an invalid Config
// or when the Kafka client cannot be built; it never waits for Kafka, the
// wallet or MySQL.
func New(cfg Config, db *sql.DB, w Wallet) (*Worker, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if db == nil || w == nil {
		return nil, errors.New("luckyoutbox: a database and a wallet are required")
	}
	bo, err := backoff.New(cfg.Backoff)
	if err != nil {
		return nil, err
	}
	wk := &Worker{cfg: cfg, db: db, wallet: w, producer: cfg.Producer, backoff: bo, groups: make(chan struct{}, creditGroupsInFlight),
		waiting: map[string]*waitingGroup{},
		m:       newMetrics(cfg.Registerer), log: cfg.Logger.With("component", Component)}
	if wk.framings, err = eventFramings(cfg.Frames, cfg.Topic); err != nil {
		return nil, fmt.Errorf("luckyoutbox: %w", err)
	}
	if wk.producer == nil {
		wk.producer, err = cfg.Kafka.NewClient(Component, kgo.DefaultProduceTopic(cfg.Topic))
		if err != nil {
			return nil, fmt.Errorf("luckyoutbox: kafka: %w", err)
		}
		wk.owned = true
	}
	return wk, nil
}

// Close closes the Kafka client New built (an injected Producer stays
// open), waiting at most until ctx ends.
func (w *Worker) Close(ctx context.Context) {
	if w.owned {
		kafkax.CloseWithin(ctx, w.producer, w.log)
	}
}

// Run polls until ctx ends: a poll that claimed a full batch is followed
// by the next at once, others by PollInterval. A failed poll (MySQL down)
// is logged and retried after PollInterval. At cancel it claims no more;
// the batch in flight finishes (its wallet calls and produce are bounded by
// their timeouts) and is recorded. It returns nil.
func (w *Worker) Run(ctx context.Context) error {
	w.log.Info("lucky outbox worker started", "worker_id", w.cfg.WorkerID, "topic", w.cfg.Topic,
		"batch_size", w.cfg.BatchSize, "poll_interval", w.cfg.PollInterval, "max_retries", w.cfg.MaxRetries)
	var lastBacklog time.Time
	for ctx.Err() == nil {
		n, err := w.ProcessBatch(ctx)
		if err != nil && ctx.Err() == nil {
			w.m.pollErrors.Inc()
			w.log.Warn("lucky outbox poll failed; retrying", "error", err)
		}
		if time.Since(lastBacklog) >= backlogInterval {
			w.refreshBacklog(ctx)
			lastBacklog = time.Now()
		}
		if err == nil && n >= w.cfg.BatchSize {
			continue
		}
		t := time.NewTimer(w.cfg.PollInterval)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
	w.log.Info("lucky outbox worker stopped", "worker_id", w.cfg.WorkerID)
	return nil
}

func (w *Worker) refreshBacklog(ctx context.Context) {
	if old, err := oldestUnfinished(ctx, w.db); err == nil {
		now := w.cfg.Now().UnixMilli()
		w.m.rewardOldest.Set(ageSeconds(now, old.rewardMs))
		for _, t := range EventMessageTypes() {
			w.m.eventOldest.WithLabelValues(t).Set(ageSeconds(now, old.eventsMs[t]))
		}
	}
	counts, err := backlogCounts(ctx, w.db)
	if err != nil {
		return
	}
	w.m.backlog.Reset()
	for _, t := range []string{EventTypeRewardCredit, EventTypeActivityEvent} {
		for _, s := range []string{StatusPending, StatusProcessing, StatusFailed} {
			w.m.backlog.WithLabelValues(t, s).Set(counts[[2]string{t, s}])
		}
	}
}

// ProcessBatch is one poll: it claims up to BatchSize due rows of each
// table (lucky_outbox, lucky_draw_events), credits the rewards
// (Concurrency calls at a time) while it produces the events, and records
// every outcome. It returns how many rows it claimed. Once rows are
// claimed, their processing no longer follows ctx's cancellation.
func (w *Worker) ProcessBatch(ctx context.Context) (int, error) {
	now := w.cfg.Now().UnixMilli()
	rows, draws, err := claim(ctx, w.db, w.cfg.WorkerID, w.cfg.BatchSize, now, now+w.cfg.LockTTL.Milliseconds())
	if err != nil || len(rows)+len(draws) == 0 {
		return 0, err
	}
	stop := ctx
	ctx = context.WithoutCancel(ctx)
	events, err := w.unpack(ctx, draws)
	var credits []row
	for _, r := range rows {
		if r.AppCode == "" {
			r.AppCode = w.cfg.AppCode
		}
		if r.EventType == EventTypeRewardCredit {
			credits = append(credits, r)
		} else {
			events = append(events, r)
		}
	}
	w.m.claimed.WithLabelValues(EventTypeRewardCredit, "worker").Add(float64(len(credits)))
	w.m.claimed.WithLabelValues(EventTypeActivityEvent, "worker").Add(float64(len(events)))
	var g errgroup.Group
	g.Go(func() error { return w.produce(ctx, stop, events) })
	g.Go(func() error { return w.creditAll(ctx, credits) })
	return len(rows) + len(draws), errors.Join(err, g.Wait())
}

// creditAll dispatches claimed rewards, the switch read once per app.
func (w *Worker) creditAll(ctx context.Context, rows []row) error {
	enabled := map[string]bool{}
	var paused []string
	var on []row
	for _, r := range rows {
		ok, seen := enabled[r.AppCode]
		if !seen {
			ok = w.dispatchEnabled(ctx, r.AppCode)
			enabled[r.AppCode] = ok
		}
		if ok {
			on = append(on, r)
		} else {
			paused = append(paused, r.EventID)
		}
	}
	var errs []error
	for _, res := range w.creditRows(ctx, on, "worker") {
		errs = append(errs, res.err)
	}
	now := w.cfg.Now().UnixMilli()
	err := release(ctx, w.db, w.cfg.WorkerID, paused, now, now+w.cfg.PollInterval.Milliseconds())
	if err == nil {
		w.m.paused.Add(float64(len(paused)))
	}
	return errors.Join(append(errs, err)...)
}

func (w *Worker) dispatchEnabled(ctx context.Context, appCode string) bool {
	if w.cfg.DispatchEnabled == nil {
		return true
	}
	on, err := w.cfg.DispatchEnabled(ctx, appCode)
	if err != nil {
		w.log.Warn("wallet_credit_dispatch unreadable; leaving rewards pending", "app_code", appCode, "error", err)
		return false
	}
	return on
}

// creditResult is the recorded outcome of one claimed reward.
type creditResult struct {
	status, receipt string
	err             error
}

// credited is one claimed reward after its wallet call.
type credited struct {
	r       row
	req     *walletv1.CreditLuckyRewardRequest
	receipt string
	err     error
	bad     bool // the payload is no CreditLuckyRewardRequest
}

// creditRows calls the wallet for claimed reward rows, Concurrency at a
// time (each bounded by WalletCreditTimeout and ctx), then records the
// outcomes: every grant of the rows in one transaction, each failure in
// its own. The results are keyed by event_id.
func (w *Worker) creditRows(ctx context.Context, rows []row, path string) map[string]creditResult {
	out := make(map[string]creditResult, len(rows))
	if len(rows) == 0 {
		return out
	}
	calls := make([]credited, len(rows))
	var g errgroup.Group
	g.SetLimit(w.cfg.Concurrency)
	for i, r := range rows {
		calls[i].r = r
		g.Go(func() error {
			calls[i] = w.callWallet(ctx, r, path)
			return nil
		})
	}
	g.Wait() //nolint:errcheck // the calls return no error: outcomes are in calls
	var granted []credited
	for _, c := range calls {
		log := w.log.With("event_id", c.r.EventID, "draw_id", c.r.AggregateID, "app_code", c.r.AppCode, "path", path)
		if c.err == nil {
			granted = append(granted, c)
			continue
		}
		st, rc, err := w.settleFailure(ctx, c.r, c.req, c.err.Error(), c.bad || errors.Is(c.err, wallet.ErrInvalidRequest), log)
		out[c.r.EventID] = creditResult{st, rc, err}
	}
	for id, res := range w.settleGranted(ctx, granted, path) {
		out[id] = res
	}
	return out
}

// callWallet credits claimed reward row r once.
func (w *Worker) callWallet(ctx context.Context, r row, path string) credited {
	c := credited{r: r, req: &walletv1.CreditLuckyRewardRequest{}}
	if err := proto.Unmarshal(r.Payload, c.req); err != nil || c.req.GetRewardId() == "" {
		// Never creditable: failed now rather than after MaxRetries.
		w.log.Error("reward_credit payload is no CreditLuckyRewardRequest; reward failed", "event_id", r.EventID, "error", err)
		c.err, c.bad = errors.New("payload is no CreditLuckyRewardRequest"), true
		return c
	}
	callCtx, cancel := context.WithTimeout(ctx, w.cfg.WalletCreditTimeout)
	t0 := time.Now()
	resp, err := w.wallet.Credit(callCtx, c.req)
	cancel()
	result := "ok"
	var ce *wallet.CreditError
	switch {
	case err == nil:
		c.receipt = resp.GetCreditReceiptId()
	case errors.As(err, &ce) && ce.Timeout(), errors.Is(err, context.DeadlineExceeded):
		result = "timeout"
	default:
		result = "error"
	}
	w.m.walletCall.WithLabelValues(path, result).Observe(time.Since(t0).Seconds())
	c.err = err
	return c
}

// settleGranted records credits in one transaction. A credit is a fact
// whoever holds the claim: each row becomes done from any status, and its
// draw granted from pending or failed (once: the LuckyRewardGranted event
// is written by the transaction that grants). A draw already granted (or
// none) answers its stored status and receipt. If the transaction fails,
// every reward stays processing under this worker until its lock expires
// and the worker credits it again (the wallet answers the same receipt).
func (w *Worker) settleGranted(ctx context.Context, cs []credited, path string) map[string]creditResult {
	out := make(map[string]creditResult, len(cs))
	if len(cs) == 0 {
		return out
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	now := w.cfg.Now().UnixMilli()
	err := inTx(ctx, w.db, func(tx *sql.Tx) error {
		clear(out)
		ids, draws := make([]string, len(cs)), make([]string, len(cs))
		for i, c := range cs {
			ids[i], draws[i] = c.r.EventID, c.r.AggregateID
		}
		if _, err := tx.ExecContext(ctx, `UPDATE lucky_outbox SET status = 'done', worker_id = '', lock_until_ms = 0, last_error = NULL, updated_at_ms = ?
			WHERE event_id IN (`+sqlbuild.List(len(ids))+`) AND status <> 'done'`, append([]any{now}, sqlbuild.Args(ids)...)...); err != nil {
			return err
		}
		locked, err := lockDraws(ctx, tx, draws)
		if err != nil {
			return err
		}
		var grant []credited
		for _, c := range cs {
			d, ok := locked[c.r.AggregateID]
			switch {
			case !ok:
				return fmt.Errorf("%w: no draw record %s", ErrUnknownReward, c.r.AggregateID)
			case d.RewardStatus != RewardPending && d.RewardStatus != RewardFailed:
				out[c.r.EventID] = creditResult{status: d.RewardStatus, receipt: d.Receipt}
			default:
				grant = append(grant, c)
				out[c.r.EventID] = creditResult{status: RewardGranted, receipt: c.receipt}
			}
		}
		if len(grant) == 0 {
			return nil
		}
		var cases strings.Builder
		args := []any{}
		gids := make([]any, len(grant))
		events := make([]event, len(grant))
		for i, c := range grant {
			cases.WriteString(" WHEN ? THEN ?")
			args = append(args, c.r.AggregateID, c.receipt)
			gids[i] = c.r.AggregateID
			d := locked[c.r.AggregateID]
			id := "LuckyRewardGranted:" + c.req.GetRewardId()
			payload, err := proto.Marshal(&activityv1.LuckyRewardGranted{
				EventId: id, AppCode: c.r.AppCode, RewardId: c.req.GetRewardId(), DrawId: c.r.AggregateID, UserId: c.req.GetUserId(),
				RewardCoins: c.req.GetRewardCoins(), CreditReceiptId: c.receipt, GiftId: d.GiftID, RoomId: d.RoomID, GrantedAtMs: now,
			})
			if err != nil {
				return err
			}
			events[i] = event{EventID: id, AppCode: c.r.AppCode, MessageType: "LuckyRewardGranted", DrawID: c.r.AggregateID, KafkaKey: d.GiftID, Payload: payload}
		}
		args = append(append(args, now), gids...)
		if _, err := tx.ExecContext(ctx, `UPDATE lucky_draw_records SET reward_status = 'granted', credit_receipt_id = CASE draw_id`+cases.String()+` END,
			updated_at_ms = ? WHERE draw_id IN (`+sqlbuild.List(len(gids))+`)`, args...); err != nil {
			return err
		}
		return insertEvents(ctx, tx, events, now)
	})
	if err != nil {
		w.log.Warn("wallet credited but the grants were not recorded; the outbox retries them (the wallet answers the same receipt)",
			"rewards", len(cs), "path", path, "error", err)
		for _, c := range cs {
			out[c.r.EventID] = creditResult{status: RewardPending, err: fmt.Errorf("luckyoutbox: record grant of %s: %w", c.r.EventID, err)}
		}
		return out
	}
	w.m.done.WithLabelValues(EventTypeRewardCredit).Add(float64(len(cs)))
	return out
}

// settleFailure records a failed credit in one transaction: attempt =
// retry_count+1, pending with backoff, or failed at MaxRetries (or at once
// when permanent). A row no longer processing under this claim (it lapsed
// and was taken over, even by this process's other path under the same
// worker id, or it was granted meanwhile) is left alone.
func (w *Worker) settleFailure(ctx context.Context, r row, req *walletv1.CreditLuckyRewardRequest, cause string, permanent bool, log *slog.Logger) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	now := w.cfg.Now().UnixMilli()
	status, receipt := RewardPending, ""
	var attempt int
	var failed, recorded bool
	err := inTx(ctx, w.db, func(tx *sql.Tx) error {
		var st, worker string
		var lease int64
		if err := tx.QueryRowContext(ctx, `SELECT status, worker_id, lock_until_ms, retry_count FROM lucky_outbox WHERE event_id = ? FOR UPDATE`, r.EventID).
			Scan(&st, &worker, &lease, &attempt); err != nil {
			return err
		}
		d, err := lockDraw(ctx, tx, r.AggregateID)
		if err != nil {
			return err
		}
		if st != StatusProcessing || worker != w.cfg.WorkerID || lease != r.Lease {
			status, receipt = d.RewardStatus, d.Receipt
			return nil
		}
		attempt++
		failed = permanent || attempt >= w.cfg.MaxRetries
		rowStatus, next := StatusPending, now+w.backoff.Delay(attempt).Milliseconds()
		if failed {
			rowStatus, next, status = StatusFailed, 0, RewardFailed
		}
		if _, err := tx.ExecContext(ctx, `UPDATE lucky_outbox SET status = ?, retry_count = ?, next_retry_at_ms = ?, last_error = ?,
			worker_id = '', lock_until_ms = 0, updated_at_ms = ? WHERE event_id = ?`, rowStatus, attempt, next, shortError(cause), now, r.EventID); err != nil {
			return err
		}
		if failed {
			if _, err := tx.ExecContext(ctx, `UPDATE lucky_draw_records SET reward_status = 'failed', updated_at_ms = ?
				WHERE draw_id = ? AND reward_status = 'pending'`, now, r.AggregateID); err != nil {
				return err
			}
		}
		id := fmt.Sprintf("LuckyRewardPending:%s:%d", req.GetRewardId(), attempt)
		payload, err := proto.Marshal(&activityv1.LuckyRewardPending{
			EventId: id, AppCode: r.AppCode, RewardId: req.GetRewardId(), DrawId: r.AggregateID, UserId: req.GetUserId(),
			RewardCoins: req.GetRewardCoins(), Attempt: int32(attempt), RetryReason: shortError(cause), GiftId: d.GiftID, RoomId: d.RoomID,
			AtMs: now, Failed: failed,
		})
		if err != nil {
			return err
		}
		recorded = true
		return insertEvent(ctx, tx, event{EventID: id, AppCode: r.AppCode, MessageType: "LuckyRewardPending", DrawID: r.AggregateID, KafkaKey: d.GiftID, Payload: payload}, now)
	})
	if err != nil {
		return RewardPending, "", fmt.Errorf("luckyoutbox: record failed credit of %s: %w", r.EventID, err)
	}
	switch {
	case !recorded:
		log.Debug("credit failed after the claim was taken over; left to its holder", "error", cause)
	case failed:
		w.m.rewardFailed.Inc()
		log.Error("reward credit failed for good; reward_status=failed (re-drive: roomflow lucky rewards retry)", "attempt", attempt, "error", cause)
	default:
		w.m.retries.WithLabelValues(EventTypeRewardCredit).Inc()
		log.Info("reward credit failed; retrying with backoff", "attempt", attempt, "error", cause)
	}
	return status, receipt, nil
}

// produce sends claimed activity events to Topic together and records the
// results: produced rows done in one statement, failed ones back to
// pending with backoff (never failed). Once stop ends (the worker is
// shutting down) the produce gets settleTimeout more, so an unreachable
// cluster cannot hold the shutdown for half the lease; rows it did not
// confirm go back to retry, as for any failed produce.
func (w *Worker) produce(ctx, stop context.Context, rows []row) error {
	if len(rows) == 0 {
		return nil
	}
	recs := make([]*kgo.Record, 0, len(rows))
	var unsent []unsentEvent
	sent := rows[:0] // the rows sent, filtered in place
	for i := range rows {
		r := &rows[i]
		value, ct, err := w.frame(r)
		if err != nil { // not sent: retried (and alerted) like a failed produce
			unsent = append(unsent, unsentEvent{*r, err})
			continue
		}
		rec := &kgo.Record{Topic: w.cfg.Topic, Value: value,
			Headers: envelope.AppendHeadersAs(nil, []byte(r.EventID), []byte(r.MessageType), []byte(r.AppCode), ct)}
		if r.KafkaKey != "" {
			rec.Key = []byte(r.KafkaKey)
		}
		recs, sent = append(recs, rec), append(sent, *r)
	}
	rows = sent
	// Bounded well inside the claim's lease, so a hung cluster cannot
	// outlive it.
	pctx, cancel := context.WithTimeout(ctx, w.cfg.LockTTL/2)
	grace := context.AfterFunc(stop, func() { time.AfterFunc(settleTimeout, cancel) })
	results := w.producer.ProduceSync(pctx, recs...)
	grace()
	cancel()
	done, retried, retries, err := w.settleProduced(ctx, rows, recs, results, unsent, w.cfg.Now().UnixMilli())
	w.m.done.WithLabelValues(EventTypeActivityEvent).Add(float64(done))
	w.m.retries.WithLabelValues(EventTypeActivityEvent).Add(float64(retried))
	if len(retries) > 0 {
		w.log.Warn("lucky events not produced; retrying with backoff", "failed", retried, "produced", done, "error", retries[0].Error)
	}
	return err
}
