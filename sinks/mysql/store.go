package mysqlsink

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/schemas/userv1"
)

// TP is a topic partition.
type TP struct {
	Topic     string
	Partition int32
}

func (tp TP) String() string { return fmt.Sprintf("%s/%d", tp.Topic, tp.Partition) }

// Record is one consumed Kafka record, decoded. A record with neither
// Ledger nor Inflow (sent to the DLQ) still advances its partition's offset.
type Record struct {
	TP
	Offset int64
	Ledger *userv1.MicLedgerEntry
	Inflow *activityv1.LuckyPoolInflow
}

// Claimed is a partition's row in roomflow_sink_offsets right after this
// instance claimed it.
type Claimed struct {
	Generation int64
	// NextOffset is the first offset not yet applied; -1 when the sink never
	// committed this partition (consume from the start).
	NextOffset int64
}

// FencedError is returned by Store.Apply when another instance claimed
// one of the batch's partitions after this one did: this instance was
// revoked (or is a zombie) and its commit is rejected. Nothing was written.
type FencedError struct {
	Partitions []TP
}

func (e *FencedError) Error() string {
	s := make([]string, len(e.Partitions))
	for i, tp := range e.Partitions {
		s[i] = tp.String()
	}
	return "mysql sink: fenced: partitions claimed by another instance: " + strings.Join(s, ", ")
}

// Retryable reports whether err is transient for a whole-batch retry: a
// deadlock (1213), a lock wait timeout (1205), a duplicate consumption key
// inserted concurrently (1062), or a lost connection. The transaction was
// rolled back (or its outcome is unknown, which the offsets check and the
// event_id dedupe make safe to retry).
func Retryable(err error) bool {
	if err == nil {
		return false
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1213, 1205, 1062, 1053, 1927, 2006, 2013, 1158, 1159, 1160, 1161:
			return true
		}
		return false
	}
	var ne net.Error
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn) ||
		errors.Is(err, sql.ErrConnDone) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, io.EOF) || errors.As(err, &ne)
}

// ErrorReason is a short label for metrics.
func ErrorReason(err error) string {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1213:
			return "deadlock"
		case 1205:
			return "lock_wait_timeout"
		case 1062:
			return "duplicate_key"
		}
		return fmt.Sprintf("mysql_%d", me.Number)
	}
	return "connection"
}

// Store writes batches and claims into MySQL for one consumer group.
type Store struct {
	db    *sql.DB
	group string
	// chunk caps the rows of one multi-row statement.
	chunk int
	// inTxn, when set, runs after the facts are written and before the
	// offsets are (tests: a crash inside the transaction).
	inTxn func(ctx context.Context) error
	// afterCommit, when set, runs right after a batch's commit (tests: a
	// crash the moment the facts are durable).
	afterCommit func(ctx context.Context) error
}

// NewStore returns a Store for consumer group group on db.
func NewStore(db *sql.DB, group string) *Store { return &Store{db: db, group: group, chunk: 1000} }

// DB is the pool the store writes to.
func (s *Store) DB() *sql.DB { return s.db }

func (s *Store) begin(ctx context.Context) (*sql.Tx, error) {
	// READ COMMITTED: no gap locks on the dedupe lookups and upserts, so
	// concurrent sinks only contend on the rows they really share.
	return s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
}

func sortTPs(tps []TP) {
	sort.Slice(tps, func(i, j int) bool {
		if tps[i].Topic != tps[j].Topic {
			return tps[i].Topic < tps[j].Topic
		}
		return tps[i].Partition < tps[j].Partition
	})
}

// tpWhere renders "(topic = ? AND partition_id IN (?,..)) OR ..." for tps.
func tpWhere(tps []TP, args []any) (string, []any) {
	byTopic := map[string][]int32{}
	var topics []string
	for _, tp := range tps {
		if _, ok := byTopic[tp.Topic]; !ok {
			topics = append(topics, tp.Topic)
		}
		byTopic[tp.Topic] = append(byTopic[tp.Topic], tp.Partition)
	}
	sort.Strings(topics)
	var b strings.Builder
	for i, t := range topics {
		if i > 0 {
			b.WriteString(" OR ")
		}
		b.WriteString("(topic = ? AND partition_id IN (")
		args = append(args, t)
		for j, p := range byTopic[t] {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteByte('?')
			args = append(args, p)
		}
		b.WriteString("))")
	}
	return b.String(), args
}

// Claim takes ownership of tps for owner: each row's owner_id becomes owner
// and its generation increases by one, in one transaction that also reads
// the stored next offsets. Any later Apply of a previous owner of these
// partitions fails with FencedError; an Apply of the previous owner that
// committed before the claim is reflected in the offsets returned.
func (s *Store) Claim(ctx context.Context, owner string, tps []TP, nowMs int64) (map[TP]Claimed, error) {
	if len(tps) == 0 {
		return map[TP]Claimed{}, nil
	}
	tps = append([]TP(nil), tps...)
	sortTPs(tps)
	tx, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	var b strings.Builder
	args := make([]any, 0, len(tps)*7)
	b.WriteString("INSERT INTO roomflow_sink_offsets (consumer_group, topic, partition_id, next_offset, owner_id, generation, updated_at_ms) VALUES ")
	for i, tp := range tps {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("(?,?,?,-1,?,1,?)")
		args = append(args, s.group, tp.Topic, tp.Partition, owner, nowMs)
	}
	b.WriteString(" ON DUPLICATE KEY UPDATE owner_id = VALUES(owner_id), generation = generation + 1, updated_at_ms = VALUES(updated_at_ms)")
	if _, err := tx.ExecContext(ctx, b.String(), args...); err != nil {
		return nil, fmt.Errorf("claim offsets: %w", err)
	}
	where, wargs := tpWhere(tps, []any{s.group})
	rows, err := tx.QueryContext(ctx, "SELECT topic, partition_id, next_offset, generation FROM roomflow_sink_offsets WHERE consumer_group = ? AND ("+where+")", wargs...)
	if err != nil {
		return nil, fmt.Errorf("read claimed offsets: %w", err)
	}
	out := make(map[TP]Claimed, len(tps))
	for rows.Next() {
		var tp TP
		var c Claimed
		if err := rows.Scan(&tp.Topic, &tp.Partition, &c.NextOffset, &c.Generation); err != nil {
			rows.Close()
			return nil, err
		}
		out[tp] = c
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("commit claim: %w", err)
	}
	return out, nil
}

// Result is what one applied batch did.
type Result struct {
	LedgerApplied, LedgerDeduplicated int
	InflowApplied, InflowDeduplicated int
	// Behind counts records below the stored offset of their partition
	// (already applied by an earlier transaction) that were skipped.
	Behind int
	Facts  Facts
	// Offsets are the next offsets stored per partition.
	Offsets map[TP]int64
}

type offsetRow struct {
	next  int64
	owner string
	gen   int64
}

// Apply writes one batch in one transaction: it locks the batch's offset
// rows and checks that owner still holds them at the claimed generations
// (else FencedError), skips records below the stored offsets, records each
// new event_id in its consumption table (repeats are counted as
// deduplicated and change nothing), applies the pre-aggregated facts of
// the new events, and stores the next offsets. Either all of it commits
// or none of it does.
func (s *Store) Apply(ctx context.Context, owner string, claims map[TP]int64, recs []Record, nowMs int64) (Result, error) {
	res := Result{Offsets: map[TP]int64{}}
	next := map[TP]int64{}
	for _, r := range recs {
		if n, ok := next[r.TP]; !ok || r.Offset+1 > n {
			next[r.TP] = r.Offset + 1
		}
	}
	if len(next) == 0 {
		return res, nil
	}
	tps := make([]TP, 0, len(next))
	for tp := range next {
		tps = append(tps, tp)
	}
	sortTPs(tps)

	tx, err := s.begin(ctx)
	if err != nil {
		return res, err
	}
	defer tx.Rollback()

	// 1. Fence: the offsets rows are locked until commit, so a claim by
	// another instance either happened before (we see it and stop) or
	// waits for this commit (and then reads our offsets).
	where, wargs := tpWhere(tps, []any{s.group})
	rows, err := tx.QueryContext(ctx, "SELECT topic, partition_id, next_offset, owner_id, generation FROM roomflow_sink_offsets WHERE consumer_group = ? AND ("+where+") ORDER BY topic, partition_id FOR UPDATE", wargs...)
	if err != nil {
		return res, fmt.Errorf("lock offsets: %w", err)
	}
	stored := make(map[TP]offsetRow, len(tps))
	for rows.Next() {
		var tp TP
		var o offsetRow
		if err := rows.Scan(&tp.Topic, &tp.Partition, &o.next, &o.owner, &o.gen); err != nil {
			rows.Close()
			return res, err
		}
		stored[tp] = o
	}
	if err := rows.Close(); err != nil {
		return res, err
	}
	if err := rows.Err(); err != nil {
		return res, err
	}
	var fenced []TP
	for _, tp := range tps {
		o, ok := stored[tp]
		if !ok || o.owner != owner || o.gen != claims[tp] {
			fenced = append(fenced, tp)
		}
	}
	if len(fenced) > 0 {
		return res, &FencedError{Partitions: fenced}
	}

	// 2. Skip what an earlier transaction already applied.
	var ledger []*userv1.MicLedgerEntry
	var inflows []*activityv1.LuckyPoolInflow
	for _, r := range recs {
		if r.Offset < stored[r.TP].next {
			res.Behind++
			continue
		}
		switch {
		case r.Ledger != nil:
			ledger = append(ledger, r.Ledger)
		case r.Inflow != nil:
			inflows = append(inflows, r.Inflow)
		}
	}
	ledger, dupL := DedupeLedger(ledger)
	inflows, dupI := DedupeInflows(inflows)

	// 3. Dedupe against the consumption tables and record the new ids.
	newLedger, err := s.consumeLedger(ctx, tx, ledger, nowMs)
	if err != nil {
		return res, err
	}
	newInflows, err := s.consumeInflows(ctx, tx, inflows, nowMs)
	if err != nil {
		return res, err
	}
	res.LedgerApplied, res.LedgerDeduplicated = len(newLedger), dupL+len(ledger)-len(newLedger)
	res.InflowApplied, res.InflowDeduplicated = len(newInflows), dupI+len(inflows)-len(newInflows)

	// 4. Facts.
	res.Facts = BuildFacts(newLedger, newInflows)
	if err := s.writeFacts(ctx, tx, res.Facts); err != nil {
		return res, err
	}

	if s.inTxn != nil {
		if err := s.inTxn(ctx); err != nil {
			return res, err
		}
	}

	// 5. Offsets.
	var b strings.Builder
	args := make([]any, 0, len(tps)*7)
	b.WriteString("INSERT INTO roomflow_sink_offsets (consumer_group, topic, partition_id, next_offset, owner_id, generation, updated_at_ms) VALUES ")
	for i, tp := range tps {
		if i > 0 {
			b.WriteByte(',')
		}
		n := max(next[tp], stored[tp].next)
		res.Offsets[tp] = n
		b.WriteString("(?,?,?,?,?,?,?)")
		args = append(args, s.group, tp.Topic, tp.Partition, n, owner, claims[tp], nowMs)
	}
	b.WriteString(" ON DUPLICATE KEY UPDATE next_offset = GREATEST(next_offset, VALUES(next_offset)), updated_at_ms = VALUES(updated_at_ms)")
	if _, err := tx.ExecContext(ctx, b.String(), args...); err != nil {
		return res, fmt.Errorf("store offsets: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return res, fmt.Errorf("commit: %w", err)
	}
	if s.afterCommit != nil {
		if err := s.afterCommit(ctx); err != nil {
			return res, err
		}
	}
	return res, nil
}

// isDup reports a duplicate-key error (1062).
func isDup(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1062
}

// execRows runs one multi-row statement per chunk of n rows: head, then
// rowPH repeated with the arguments add appends for row i, then tail.
func (s *Store) execRows(ctx context.Context, tx *sql.Tx, head, rowPH, tail string, n int, add func(i int, args []any) []any) error {
	for lo := 0; lo < n; lo += s.chunk {
		hi := min(n, lo+s.chunk)
		var b strings.Builder
		b.Grow(len(head) + len(tail) + (hi-lo)*(len(rowPH)+1))
		b.WriteString(head)
		var args []any
		for i := lo; i < hi; i++ {
			if i > lo {
				b.WriteByte(',')
			}
			b.WriteString(rowPH)
			args = add(i, args)
		}
		b.WriteString(tail)
		if _, err := tx.ExecContext(ctx, b.String(), args...); err != nil {
			return err
		}
	}
	return nil
}

const micConsumptionHead = "INSERT INTO user_mic_event_consumption (app_code, event_id, event_type, mic_session_id, user_id, action, status, skip_reason, created_at_ms, consumed_at_ms, updated_at_ms) VALUES "

// consumeLedger inserts the consumption rows of es and returns the entries
// that were new (see consumeNew).
func (s *Store) consumeLedger(ctx context.Context, tx *sql.Tx, es []*userv1.MicLedgerEntry, nowMs int64) ([]*userv1.MicLedgerEntry, error) {
	return consumeNew(ctx, s, tx, "user_mic_event_consumption", es,
		func(e *userv1.MicLedgerEntry) EventKey { return EventKey{e.AppCode, e.EventId} },
		func(es []*userv1.MicLedgerEntry) error {
			return s.execRows(ctx, tx, micConsumptionHead, "(?,?,?,?,?,?,?,?,?,?,?)", "", len(es), func(i int, a []any) []any {
				e := es[i]
				created := e.OccurredAtMs
				if created <= 0 {
					created = nowMs
				}
				return append(a, e.AppCode, e.EventId, e.EventType, e.MicSessionId, e.UserId, e.Action, e.Status, e.SkipReason, created, nowMs, nowMs)
			})
		})
}

const inflowConsumptionHead = "INSERT INTO lucky_pool_inflow_consumption (app_code, event_id, source_event_id, room_id, gift_id, rule_version, pool_in, platform_in, room_in, gift_in, status, occurred_at_ms, created_at_ms) VALUES "

// consumeInflows inserts the consumption rows of in and returns the
// inflows that were new (see consumeNew).
func (s *Store) consumeInflows(ctx context.Context, tx *sql.Tx, in []*activityv1.LuckyPoolInflow, nowMs int64) ([]*activityv1.LuckyPoolInflow, error) {
	return consumeNew(ctx, s, tx, "lucky_pool_inflow_consumption", in,
		func(e *activityv1.LuckyPoolInflow) EventKey { return EventKey{e.AppCode, e.EventId} },
		func(in []*activityv1.LuckyPoolInflow) error {
			return s.execRows(ctx, tx, inflowConsumptionHead, "(?,?,?,?,?,?,?,?,?,?,?,?,?)", "", len(in), func(i int, a []any) []any {
				e := in[i]
				return append(a, e.AppCode, e.EventId, e.SourceEventId, e.RoomId, e.GiftId, e.RuleVersion, e.PoolIn, e.PlatformIn, e.RoomIn, e.GiftIn, StatusConsumed, e.OccurredAtMs, nowMs)
			})
		})
}

// consumeNew inserts the consumption rows of es into table (insert writes
// the rows of the events it is given) and returns the events that were new.
// The common case (all new) is one optimistic multi-row INSERT per chunk;
// on a duplicate key the attempt is rolled back to a savepoint, the known
// ids are looked up, and only the others are inserted and returned.
func consumeNew[E any](ctx context.Context, s *Store, tx *sql.Tx, table string, es []E, key func(E) EventKey, insert func([]E) error) ([]E, error) {
	if len(es) == 0 {
		return nil, nil
	}
	keys := make([]EventKey, len(es))
	for i, e := range es {
		keys[i] = key(e)
	}
	known, err := s.optimistic(ctx, tx, table, keys, func() error { return insert(es) })
	if err != nil {
		return nil, err
	}
	if known == nil {
		return es, nil
	}
	var fresh []E
	for i, e := range es {
		if _, ok := known[keys[i]]; !ok {
			fresh = append(fresh, e)
		}
	}
	if err := insert(fresh); err != nil {
		return nil, fmt.Errorf("insert %s: %w", table, err)
	}
	return fresh, nil
}

// optimistic runs insert (all keys at once) under a savepoint. It returns
// nil when every key was new. On a duplicate key it rolls back to the
// savepoint, so no chunk of the failed attempt stays behind, and returns
// the keys already in table; the caller then inserts only the others.
func (s *Store) optimistic(ctx context.Context, tx *sql.Tx, table string, keys []EventKey, insert func() error) (map[EventKey]struct{}, error) {
	// One statement is rolled back whole by the server on a duplicate
	// key; only several chunks need the savepoint.
	chunked := len(keys) > s.chunk
	if chunked {
		if _, err := tx.ExecContext(ctx, "SAVEPOINT sink_consume"); err != nil {
			return nil, fmt.Errorf("savepoint: %w", err)
		}
	}
	err := insert()
	if err == nil {
		return nil, nil
	}
	if !isDup(err) {
		return nil, fmt.Errorf("insert %s: %w", table, err)
	}
	if chunked {
		if _, err := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT sink_consume"); err != nil {
			return nil, fmt.Errorf("rollback to savepoint: %w", err)
		}
	}
	known, err := s.existing(ctx, tx, table, keys)
	if err != nil {
		return nil, err
	}
	if known == nil {
		known = map[EventKey]struct{}{}
	}
	return known, nil
}

// existing returns which of keys are already in table (a consumption
// table keyed by (app_code, event_id)).
func (s *Store) existing(ctx context.Context, tx *sql.Tx, table string, keys []EventKey) (map[EventKey]struct{}, error) {
	byApp := map[string][]string{}
	for _, k := range keys {
		byApp[k.AppCode] = append(byApp[k.AppCode], k.EventID)
	}
	out := map[EventKey]struct{}{}
	for app, ids := range byApp {
		for lo := 0; lo < len(ids); lo += s.chunk {
			hi := min(len(ids), lo+s.chunk)
			q := "SELECT event_id FROM " + table + " WHERE app_code = ? AND event_id IN (?" + strings.Repeat(",?", hi-lo-1) + ")"
			args := make([]any, 0, hi-lo+1)
			args = append(args, app)
			for _, id := range ids[lo:hi] {
				args = append(args, id)
			}
			rows, err := tx.QueryContext(ctx, q, args...)
			if err != nil {
				return nil, fmt.Errorf("dedupe %s: %w", table, err)
			}
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					rows.Close()
					return nil, err
				}
				out[EventKey{app, id}] = struct{}{}
			}
			// Err, not only Close: an iteration cut short must not read as
			// "these ids are new".
			if err := errors.Join(rows.Err(), rows.Close()); err != nil {
				return nil, fmt.Errorf("dedupe %s: %w", table, err)
			}
		}
	}
	return out, nil
}

func nullIfZero(v int64) any {
	if v == 0 {
		return nil
	}
	return v
}

var sessionCols = []string{
	"app_code", "mic_session_id", "user_id", "room_id", "first_seat_no", "current_seat_no", "status",
	"seat_started_at_ms", "publishing_started_at_ms", "ended_at_ms", "end_reason", "seat_occupied_ms",
	"mic_online_ms", "opened_event_id", "publish_event_id", "closed_event_id", "last_event_id",
	"last_room_version", "created_at_ms", "updated_at_ms", "snapshot_version",
}

// sessionUpsert replaces a stored snapshot only with a newer version.
// snapshot_version is assigned last: MySQL evaluates the assignments left
// to right, so the comparisons above it still see the old version.
var sessionHead, sessionTail, sessionPH = func() (string, string, string) {
	head := "INSERT INTO user_mic_sessions (" + strings.Join(sessionCols, ", ") + ") VALUES "
	var t strings.Builder
	t.WriteString(" ON DUPLICATE KEY UPDATE ")
	for _, c := range sessionCols[2 : len(sessionCols)-1] {
		fmt.Fprintf(&t, "%s = IF(VALUES(snapshot_version) > snapshot_version, VALUES(%s), %s), ", c, c, c)
	}
	t.WriteString("snapshot_version = GREATEST(snapshot_version, VALUES(snapshot_version))")
	return head, t.String(), "(" + strings.TrimSuffix(strings.Repeat("?,", len(sessionCols)), ",") + ")"
}()

const (
	dailyHead = "INSERT INTO user_mic_daily_stats (app_code, user_id, stat_date, seat_occupied_ms, mic_online_ms, session_count, room_count, first_mic_at_ms, last_mic_at_ms, updated_at_ms) VALUES "
	dailyTail = " ON DUPLICATE KEY UPDATE seat_occupied_ms = seat_occupied_ms + VALUES(seat_occupied_ms), " +
		"mic_online_ms = mic_online_ms + VALUES(mic_online_ms), session_count = session_count + VALUES(session_count), " +
		"room_count = room_count + VALUES(room_count), " + firstMicMin + ", " +
		"last_mic_at_ms = GREATEST(last_mic_at_ms, VALUES(last_mic_at_ms)), updated_at_ms = GREATEST(updated_at_ms, VALUES(updated_at_ms))"
	lifetimeHead = "INSERT INTO user_mic_lifetime_stats (app_code, user_id, seat_occupied_ms, mic_online_ms, session_count, first_mic_at_ms, last_mic_at_ms, updated_at_ms) VALUES "
	lifetimeTail = " ON DUPLICATE KEY UPDATE seat_occupied_ms = seat_occupied_ms + VALUES(seat_occupied_ms), " +
		"mic_online_ms = mic_online_ms + VALUES(mic_online_ms), session_count = session_count + VALUES(session_count), " +
		firstMicMin + ", " +
		"last_mic_at_ms = GREATEST(last_mic_at_ms, VALUES(last_mic_at_ms)), updated_at_ms = GREATEST(updated_at_ms, VALUES(updated_at_ms))"
	// firstMicMin is MIN ignoring 0 (0 means "not set").
	firstMicMin = "first_mic_at_ms = IF(VALUES(first_mic_at_ms) = 0, first_mic_at_ms, IF(first_mic_at_ms = 0, VALUES(first_mic_at_ms), LEAST(first_mic_at_ms, VALUES(first_mic_at_ms))))"
	poolHead    = "INSERT INTO lucky_pools (app_code, scope_type, scope_id, balance, total_in, version, updated_at_ms) VALUES "
	poolTail    = " ON DUPLICATE KEY UPDATE balance = balance + VALUES(balance), total_in = total_in + VALUES(total_in), version = version + 1, updated_at_ms = GREATEST(updated_at_ms, VALUES(updated_at_ms))"
)

func (s *Store) writeFacts(ctx context.Context, tx *sql.Tx, f Facts) error {
	if err := s.execRows(ctx, tx, sessionHead, sessionPH, sessionTail, len(f.Sessions), func(i int, a []any) []any {
		r := f.Sessions[i]
		return append(a, r.AppCode, r.MicSessionId, r.UserId, r.RoomId, r.FirstSeatNo, r.CurrentSeatNo, r.Status,
			r.SeatStartedAtMs, nullIfZero(r.PublishingStartedAtMs), nullIfZero(r.EndedAtMs), r.EndReason, r.SeatOccupiedMs,
			r.MicOnlineMs, r.OpenedEventId, r.PublishEventId, r.ClosedEventId, r.LastEventId,
			r.LastRoomVersion, r.CreatedAtMs, r.UpdatedAtMs, r.Version)
	}); err != nil {
		return fmt.Errorf("upsert user_mic_sessions: %w", err)
	}
	if err := s.execRows(ctx, tx, dailyHead, "(?,?,?,?,?,?,?,?,?,?)", dailyTail, len(f.Daily), func(i int, a []any) []any {
		r := f.Daily[i]
		return append(a, r.AppCode, r.UserID, r.StatDate, r.SeatOccupiedMs, r.MicOnlineMs, r.SessionCount, r.RoomCount, r.FirstMicAtMs, r.LastMicAtMs, r.UpdatedAtMs)
	}); err != nil {
		return fmt.Errorf("upsert user_mic_daily_stats: %w", err)
	}
	if err := s.execRows(ctx, tx, lifetimeHead, "(?,?,?,?,?,?,?,?)", lifetimeTail, len(f.Lifetime), func(i int, a []any) []any {
		r := f.Lifetime[i]
		return append(a, r.AppCode, r.UserID, r.SeatOccupiedMs, r.MicOnlineMs, r.SessionCount, r.FirstMicAtMs, r.LastMicAtMs, r.UpdatedAtMs)
	}); err != nil {
		return fmt.Errorf("upsert user_mic_lifetime_stats: %w", err)
	}
	if err := s.execRows(ctx, tx, poolHead, "(?,?,?,?,?,1,?)", poolTail, len(f.Pools), func(i int, a []any) []any {
		r := f.Pools[i]
		return append(a, r.AppCode, r.ScopeType, r.ScopeID, r.In, r.In, r.UpdatedAtMs)
	}); err != nil {
		return fmt.Errorf("upsert lucky_pools: %w", err)
	}
	return nil
}
