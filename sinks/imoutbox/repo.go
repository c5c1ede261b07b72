// Package imoutbox delivers room events to Tencent IM with the room_outbox
// semantics of IM-1 to IM-12 in docs/requirements.md: a Kafka fast path and
// a compensation worker that claim rows (pending/retryable, or delivering
// with an expired lock) by setting status delivering with a worker id and a
// lock deadline, publish, and mark delivered or retryable (retry_count+1,
// short last_error).
//
// The fast path (FastPath) claims each poll's events in one transaction
// and pipelines them: rooms send concurrently, each room in order across
// polls, results are recorded in batched statements within milliseconds,
// and offsets are committed only behind recorded results. The compensation
// worker (Service.RunOutboxWorker / ProcessPendingOutbox) scans pending
// rows older than claim_grace, retryable rows and expired claims with FOR
// UPDATE SKIP LOCKED. A live process renews the claims it is working on
// (lock_ttl/3), so only a crashed process's claims expire.
//
// Delivery is at least once: a crash between the send and the mark leaves
// the row delivering until its lock expires, then it is sent again with the
// same Random and the same bytes, which Tencent IM drops as a duplicate
// within 5 minutes. Clients also dedupe by event_id.
//
// A Publisher is built from a Config (zero fields take their defaults; the
// IM credentials, the consumer group, the topic and the brokers are
// required when delivering) on a MySQL pool:
//
//	p, err := imoutbox.NewPublisher(imoutbox.Config{
//		ServiceConfig: imoutbox.ServiceConfig{Registerer: reg, Logger: log},
//		IM:            tencentim.Config{SDKAppID: 1400000000, SecretKey: secret},
//		FastPathDelay: 3 * time.Second, // room-service publishes itself first
//		Group:         "roomflow-im-publisher",
//		Topic:         "hyapp.room.events.v1",
//		Kafka:         kafkax.Cluster{Brokers: brokers},
//	}, db)
//	...
//	err = p.Run(ctx)
package imoutbox

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hyapp/roomflow/internal/sqlbuild"
	"github.com/hyapp/roomflow/schemas/envelope"
)

// Status values of room_outbox.status (the IM channel's status).
const (
	StatusPending    = "pending"
	StatusDelivering = "delivering"
	StatusDelivered  = "delivered"
	StatusRetryable  = "retryable"
	StatusFailed     = "failed"
)

// Row is a claimed room_outbox row.
type Row struct {
	ID          int64
	EventID     string
	EventType   string
	RoomID      string
	RoomVersion int64
	// Payload is the stored EventEnvelope (compensation claims only; the
	// fast path publishes the Kafka record's identical bytes).
	Payload     []byte
	RetryCount  int
	CreatedAtMs int64
	// PrevStatus is the status before this claim: pending, retryable, or
	// delivering (an expired claim taken over).
	PrevStatus string
}

// Repo reads and updates room_outbox's IM status columns. It never writes
// any other column.
type Repo struct {
	db         *sql.DB
	now        func() time.Time
	backlogCap int // rows Backlog reads per status (tests lower it)
}

// NewRepo returns a repository on db.
func NewRepo(db *sql.DB) *Repo { return &Repo{db: db, now: time.Now, backlogCap: BacklogCountCap} }

// rc is the isolation of every statement that locks room_outbox rows.
// Under the server's default REPEATABLE READ an UPDATE that the optimizer
// runs as a scan (a small table, a long id list) locks every row it reads
// until it ends, rows of other workers' claims included; under READ
// COMMITTED it skips rows that do not match without locking or waiting for
// them, so a mark never holds up a claim and two of them cannot deadlock
// over rows only one of them wants.
var rc = &sql.TxOptions{Isolation: sql.LevelReadCommitted}

// exec runs one write statement at rc.
func (r *Repo) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	tx, err := r.db.BeginTx(ctx, rc)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return res, tx.Commit()
}

// EventClaims is the fast path's claim result for a set of event ids.
type EventClaims struct {
	Claimed map[string]Row // by event_id
	// Done are rows already delivered (room-service's synchronous publish,
	// or an earlier delivery) or failed: not sent again.
	Done []string
	// Busy are rows another worker holds (delivering with a live lock):
	// that worker delivers them.
	Busy []string
	// Missing are event ids without a room_outbox row.
	Missing []string
}

// ClaimEvents claims the rows of eventIDs in one transaction: rows that are
// pending or retryable, or delivering with lock_until_ms in the past, become
// delivering for worker until now+lockTTL. A row another transaction locks
// right now is waited for, not skipped: every such lock (a claim, a mark,
// room-service's own update) ends within milliseconds, and only what it
// leaves behind says whether the row is another worker's (delivering, a
// live lock: Busy). Skipping it (SKIP LOCKED) reported rows our own
// recorder's mark happened to lock as Busy, and the fast path left them to
// the compensation scan: late, after later events of their room.
func (r *Repo) ClaimEvents(ctx context.Context, worker string, eventIDs []string, lockTTL time.Duration) (EventClaims, error) {
	res := EventClaims{Claimed: map[string]Row{}}
	if len(eventIDs) == 0 {
		return res, nil
	}
	now := r.now().UnixMilli()
	tx, err := r.db.BeginTx(ctx, rc)
	if err != nil {
		return res, fmt.Errorf("imoutbox: claim events: %w", err)
	}
	defer tx.Rollback()
	args := make([]any, len(eventIDs))
	for i, id := range eventIDs {
		args[i] = id
	}
	rows, err := tx.QueryContext(ctx, `SELECT id, event_id, event_type, room_id, room_version, status, retry_count, lock_until_ms, created_at_ms
		FROM room_outbox WHERE event_id IN (`+sqlbuild.List(len(eventIDs))+`) FOR UPDATE`, args...)
	if err != nil {
		return res, fmt.Errorf("imoutbox: claim events: %w", err)
	}
	seen := map[string]bool{}
	var ids []any
	for rows.Next() {
		var row Row
		var status string
		var lockUntil int64
		if err := rows.Scan(&row.ID, &row.EventID, &row.EventType, &row.RoomID, &row.RoomVersion, &status, &row.RetryCount, &lockUntil, &row.CreatedAtMs); err != nil {
			rows.Close()
			return res, fmt.Errorf("imoutbox: claim events: %w", err)
		}
		seen[row.EventID] = true
		switch {
		case status == StatusPending || status == StatusRetryable || (status == StatusDelivering && lockUntil < now):
			row.PrevStatus = status
			res.Claimed[row.EventID] = row
			ids = append(ids, row.ID)
		case status == StatusDelivering:
			res.Busy = append(res.Busy, row.EventID)
		default:
			res.Done = append(res.Done, row.EventID)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return res, fmt.Errorf("imoutbox: claim events: %w", err)
	}
	if len(ids) > 0 {
		if err := claimIDs(ctx, tx, worker, ids, now, now+lockTTL.Milliseconds()); err != nil {
			return res, err
		}
	}
	if err := tx.Commit(); err != nil {
		return res, fmt.Errorf("imoutbox: claim events: commit: %w", err)
	}
	for _, id := range eventIDs {
		if !seen[id] {
			res.Missing = append(res.Missing, id)
		}
	}
	return res, nil
}

func claimIDs(ctx context.Context, tx *sql.Tx, worker string, ids []any, now, lockUntil int64) error {
	args := append([]any{worker, lockUntil, now}, ids...)
	if _, err := tx.ExecContext(ctx, `UPDATE room_outbox SET status = 'delivering', worker_id = ?, lock_until_ms = ?, updated_at_ms = ?
		WHERE id IN (`+sqlbuild.List(len(ids))+`)`, args...); err != nil {
		return fmt.Errorf("imoutbox: claim: update: %w", err)
	}
	return nil
}

// ClaimPending is the compensation scan (IM-2):
// up to limit rows, oldest eligible first, among
//   - pending rows created at least grace ago (the fast path gets them first),
//   - retryable rows (lock_until_ms holds the instant of the last failure),
//   - delivering rows whose lock_until_ms has passed (a crashed worker),
//
// found by plain reads of the (status, lock_until_ms, id) index (in index
// order, so a large backlog costs limit rows per branch, not a sort), then
// locked by primary key with FOR UPDATE SKIP LOCKED and re-checked, so
// concurrent workers never claim the same row and the scan never locks
// rows it does not take; then set delivering for worker until now+lockTTL.
func (r *Repo) ClaimPending(ctx context.Context, worker string, limit int, grace, lockTTL time.Duration) ([]Row, error) {
	return r.ClaimPendingOf(ctx, worker, limit, grace, lockTTL, nil, 1)
}

// ClaimPendingOf is ClaimPending limited to the rows whose room_id keep
// accepts (nil: every room): step 1 reads up to limit × spread candidates
// per branch and keeps those of accepted rooms, so a replica that owns
// 1/spread of the rooms still finds about limit rows of its own. Rows of
// other rooms are neither locked nor changed.
func (r *Repo) ClaimPendingOf(ctx context.Context, worker string, limit int, grace, lockTTL time.Duration, keep func(room string) bool, spread int) ([]Row, error) {
	now := r.now().UnixMilli()
	tx, err := r.db.BeginTx(ctx, rc)
	if err != nil {
		return nil, fmt.Errorf("imoutbox: claim pending: %w", err)
	}
	defer tx.Rollback()
	read := limit
	if keep != nil {
		read = limit * max(1, spread)
	}
	candIDs, err := pendingCandidates(ctx, tx, now, grace, read, limit, keep)
	if err != nil || len(candIDs) == 0 {
		return nil, err
	}
	all, err := lockPendingCandidates(ctx, tx, candIDs, now, grace)
	if err != nil {
		return nil, err
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].eligible != all[j].eligible {
			return all[i].eligible < all[j].eligible
		}
		return all[i].ID < all[j].ID
	})
	if len(all) > limit {
		all = all[:limit] // the rest stay untouched; their locks end with the transaction
	}
	out := make([]Row, len(all))
	ids := make([]any, len(all))
	for i, c := range all {
		out[i], ids[i] = c.Row, c.ID
	}
	if len(ids) > 0 {
		if err := claimIDs(ctx, tx, worker, ids, now, now+lockTTL.Milliseconds()); err != nil {
			return nil, err
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("imoutbox: claim pending: commit: %w", err)
	}
	// Hand rows out in id order so one room's events go out in order.
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// pendingCandidate is a row the scan locked, with the instant it became
// eligible (created_at_ms for pending rows, lock_until_ms otherwise).
type pendingCandidate struct {
	Row
	eligible int64
}

// pendingCandidates is the scan's step 1: the ids of up to limit rows per
// branch (pending past grace, retryable, expired claims) whose room keep
// accepts (nil: every room), among the first read rows of each branch in
// index order. Plain (non-locking) reads, so the scan never locks rows it
// does not claim, such as fresh pending rows the fast path is claiming.
func pendingCandidates(ctx context.Context, tx *sql.Tx, now int64, grace time.Duration, read, limit int, keep func(room string) bool) ([]any, error) {
	branches := []struct {
		where string
		args  []any
	}{
		{`WHERE status = 'pending' AND lock_until_ms <= ? AND created_at_ms <= ? ORDER BY lock_until_ms, id`, []any{now, now - grace.Milliseconds()}},
		{`WHERE status = 'retryable' AND lock_until_ms <= ? ORDER BY lock_until_ms, id`, []any{now}},
		{`WHERE status = 'delivering' AND lock_until_ms < ? ORDER BY lock_until_ms, id`, []any{now}},
	}
	var candIDs []any
	for _, b := range branches {
		rows, err := tx.QueryContext(ctx, `SELECT id, room_id FROM room_outbox `+b.where+` LIMIT ?`, append(b.args, read)...)
		if err != nil {
			return nil, fmt.Errorf("imoutbox: claim pending: %w", err)
		}
		kept := 0
		for rows.Next() {
			var id int64
			var room string
			if err := rows.Scan(&id, &room); err != nil {
				rows.Close()
				return nil, fmt.Errorf("imoutbox: claim pending: %w", err)
			}
			if kept < limit && (keep == nil || keep(room)) {
				candIDs = append(candIDs, id)
				kept++
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("imoutbox: claim pending: %w", err)
		}
	}
	return candIDs, nil
}

// lockPendingCandidates is the scan's step 2: it locks the candidates by
// primary key, SKIP LOCKED, re-checking eligibility (another worker may
// have claimed one since step 1), and returns the rows it locked.
func lockPendingCandidates(ctx context.Context, tx *sql.Tx, candIDs []any, now int64, grace time.Duration) ([]pendingCandidate, error) {
	args := append([]any{}, candIDs...)
	args = append(args, now, now-grace.Milliseconds(), now, now)
	rows, err := tx.QueryContext(ctx, `SELECT id, event_id, event_type, room_id, room_version, payload, retry_count, created_at_ms, status, lock_until_ms FROM room_outbox WHERE id IN (`+sqlbuild.List(len(candIDs))+`) AND (
		(status = 'pending' AND lock_until_ms <= ? AND created_at_ms <= ?) OR
		(status = 'retryable' AND lock_until_ms <= ?) OR
		(status = 'delivering' AND lock_until_ms < ?)) FOR UPDATE SKIP LOCKED`, args...)
	if err != nil {
		return nil, fmt.Errorf("imoutbox: claim pending: %w", err)
	}
	var all []pendingCandidate
	for rows.Next() {
		var c pendingCandidate
		var lockUntil int64
		if err := rows.Scan(&c.ID, &c.EventID, &c.EventType, &c.RoomID, &c.RoomVersion, &c.Payload, &c.RetryCount, &c.CreatedAtMs, &c.PrevStatus, &lockUntil); err != nil {
			rows.Close()
			return nil, fmt.Errorf("imoutbox: claim pending: %w", err)
		}
		c.eligible = lockUntil
		if c.PrevStatus == StatusPending {
			c.eligible = c.CreatedAtMs
		}
		all = append(all, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("imoutbox: claim pending: %w", err)
	}
	return all, nil
}

// MarkDelivered sets rows delivered with last_error NULL (IM-3), in one
// statement. A delivery is a fact whoever holds the claim, so only
// already-delivered rows are left alone.
func (r *Repo) MarkDelivered(ctx context.Context, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	args := []any{r.now().UnixMilli()}
	for _, id := range ids {
		args = append(args, id)
	}
	if _, err := r.exec(ctx, `UPDATE room_outbox SET status = 'delivered', last_error = NULL, lock_until_ms = 0, updated_at_ms = ?
		WHERE id IN (`+sqlbuild.List(len(ids))+`) AND status <> 'delivered'`, args...); err != nil {
		return fmt.Errorf("imoutbox: mark delivered: %w", err)
	}
	return nil
}

// Failure is one failed delivery to record.
type Failure struct {
	ID    int64
	Error string // short, secret-free; truncated to 512 bytes
	// Failed marks the row failed (a permanent error with
	// im.mark_permanent_failed set) instead of retryable.
	Failed bool
}

// MarkFailed records failures (IM-3): status
// retryable (or failed), retry_count+1, last_error, lock_until_ms = now so
// the row is retried at the next scan after rows that failed earlier. Only
// rows still delivering under worker's claim change: a claim that expired
// and was delivered by another worker stays delivered.
func (r *Repo) MarkFailed(ctx context.Context, worker string, fails []Failure) error {
	now := r.now().UnixMilli()
	for _, status := range []string{StatusRetryable, StatusFailed} {
		var cases strings.Builder
		var caseArgs, idArgs []any
		for _, f := range fails {
			if f.Failed != (status == StatusFailed) {
				continue
			}
			cases.WriteString(" WHEN ? THEN ?")
			caseArgs = append(caseArgs, f.ID, envelope.Clip(f.Error, 512))
			idArgs = append(idArgs, f.ID)
		}
		if len(idArgs) == 0 {
			continue
		}
		args := append([]any{status}, caseArgs...)
		args = append(args, now, now)
		args = append(args, idArgs...)
		args = append(args, worker)
		if _, err := r.exec(ctx, `UPDATE room_outbox SET status = ?, retry_count = retry_count + 1,
			last_error = CASE id`+cases.String()+` END, lock_until_ms = ?, updated_at_ms = ?
			WHERE id IN (`+sqlbuild.List(len(idArgs))+`) AND status = 'delivering' AND worker_id = ?`, args...); err != nil {
			return fmt.Errorf("imoutbox: mark failed: %w", err)
		}
	}
	return nil
}

// Release hands claimed rows that were never sent back to their previous
// status (shutdown before their turn), so no one waits for the lock.
func (r *Repo) Release(ctx context.Context, worker string, rows []Row) error {
	now := r.now().UnixMilli()
	by := map[string][]any{}
	for _, row := range rows {
		st := row.PrevStatus
		if st != StatusPending {
			st = StatusRetryable
		}
		by[st] = append(by[st], row.ID)
	}
	for st, ids := range by {
		args := append([]any{st, now}, ids...)
		args = append(args, worker)
		if _, err := r.exec(ctx, `UPDATE room_outbox SET status = ?, worker_id = '', lock_until_ms = 0, updated_at_ms = ?
			WHERE id IN (`+sqlbuild.List(len(ids))+`) AND status = 'delivering' AND worker_id = ?`, args...); err != nil {
			return fmt.Errorf("imoutbox: release: %w", err)
		}
	}
	return nil
}

// BacklogCountCap bounds the rows Backlog reads per status, so the gauge
// refresh costs the same with IM down for a day as with an empty outbox.
const BacklogCountCap = 100_000

// Backlog is what the gauges report.
type Backlog struct {
	// ByStatus counts pending, retryable, delivering and failed rows, each
	// at most BacklogCountCap: a count equal to the cap means "at least".
	ByStatus map[string]int64
	// OldestMs is the created_at_ms of the lowest-id undelivered row
	// (pending, retryable or delivering), 0 when there is none. For a
	// status over the cap it is the lowest id among the rows read, so the
	// age it gives is then a lower bound (exact for pending, read in id order).
	OldestMs int64
}

// Backlog counts undelivered rows per status in one statement that reads
// at most BacklogCountCap entries of the (status, lock_until_ms, id) index
// per status (index only) plus one row by primary key per status. It fails
// only when MySQL does.
func (r *Repo) Backlog(ctx context.Context) (Backlog, error) {
	statuses := []string{StatusPending, StatusRetryable, StatusDelivering, StatusFailed}
	b := Backlog{ByStatus: make(map[string]int64, len(statuses))}
	var q strings.Builder
	var args []any
	// Ids stand in for age: ids grow with inserts, and MIN(created_at_ms)
	// would need a row lookup per undelivered row.
	q.WriteString(`SELECT c.status, c.n, COALESCE(o.created_at_ms, 0) FROM (`)
	for i, st := range statuses {
		b.ByStatus[st] = 0
		if i > 0 {
			q.WriteString(` UNION ALL `)
		}
		q.WriteString(`SELECT '` + st + `' AS status, COUNT(*) AS n, MIN(id) AS first FROM (SELECT id FROM room_outbox
			WHERE status = '` + st + `' ORDER BY lock_until_ms, id LIMIT ?) s_` + st)
		args = append(args, r.backlogCap)
	}
	q.WriteString(`) c LEFT JOIN room_outbox o ON o.id = c.first`)
	rows, err := r.db.QueryContext(ctx, q.String(), args...)
	if err != nil {
		return b, fmt.Errorf("imoutbox: backlog: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var st string
		var n, oldest int64
		if err := rows.Scan(&st, &n, &oldest); err != nil {
			return b, fmt.Errorf("imoutbox: backlog: %w", err)
		}
		b.ByStatus[st] = n
		if st != StatusFailed && oldest > 0 && (b.OldestMs == 0 || oldest < b.OldestMs) {
			b.OldestMs = oldest
		}
	}
	if err := rows.Err(); err != nil {
		return b, fmt.Errorf("imoutbox: backlog: %w", err)
	}
	return b, nil
}

// RenewLocks extends worker's claims on ids (rows still delivering under
// worker) to now+lockTTL, at most 1000 ids per statement. A live worker
// renews the rows it is still working on well before they expire, so only
// a crashed or stalled worker's claims (or rows whose result could not be
// recorded) ever expire and get taken over.
func (r *Repo) RenewLocks(ctx context.Context, worker string, ids []int64, lockTTL time.Duration) (int64, error) {
	var total int64
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), 1000)]
		ids = ids[len(chunk):]
		args := []any{r.now().UnixMilli() + lockTTL.Milliseconds()}
		for _, id := range chunk {
			args = append(args, id)
		}
		args = append(args, worker)
		res, err := r.exec(ctx, `UPDATE room_outbox SET lock_until_ms = ?
			WHERE id IN (`+sqlbuild.List(len(chunk))+`) AND status = 'delivering' AND worker_id = ?`, args...)
		if err != nil {
			return total, fmt.Errorf("imoutbox: renew locks: %w", err)
		}
		n, _ := res.RowsAffected()
		total += n
	}
	return total, nil
}
