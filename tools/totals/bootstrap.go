// Package totals is `roomflow totals bootstrap`: it seeds the mic
// processor's totals state and the compacted totals topics from the MySQL
// facts, once, before the processor publishes totals (issue 35).
//
// The mic processor keeps a partition's totals only once the partition's
// marker (mic.KeyTotalsBootstrap) is in its state, so totals are never
// counted from 0 over a database with history. The bootstrap refuses
// (*RefusedError) unless the mic processor's group has no members and the
// sink has applied the whole mic ledger (its stored offsets leave no data
// record behind: every delta is in user_mic_lifetime_stats and
// user_mic_daily_stats). It then streams every user's rows, writes the
// user's totals in the mic state's encoding to the changelog partition of
// the user's input partition (the input topic's partition count and the
// producers' partitioner, murmur2 of the decimal user_id) and to the
// totals topics, in Kafka transactions of at most Config.BatchSize users
// under its own transactional id, and ends with each partition's marker.
// Partitions already marked are skipped, so a rerun after a crash redoes
// only what no marker covers (rewriting the same values). A fresh install
// bootstraps an empty database: markers only, with no day missing.
package totals

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/schemareg"
	"github.com/hyapp/roomflow/processors/mic"
	"github.com/hyapp/roomflow/processors/streams"
	"github.com/hyapp/roomflow/schemas/envelope"
	"github.com/hyapp/roomflow/schemas/userv1"
	mysqlsink "github.com/hyapp/roomflow/sinks/mysql"
)

// DefaultBatchSize is the users per transaction.
const DefaultBatchSize = 2000

// Config configures a bootstrap.
type Config struct {
	Kafka kafkax.Cluster
	// Input is the mic processor's input (kafka.topics.user_mic_events):
	// its partition count places users. Changelog is its state changelog;
	// Ledger the mic ledger the sink applies; DailyTotals and
	// LifetimeTotals the totals topics.
	Input, Changelog, Ledger, DailyTotals, LifetimeTotals string
	// MicGroup (process.mic_group) must have no members; SinkGroup
	// (sink.group) names the sink's stored offsets.
	MicGroup, SinkGroup string
	// DayTotalsRetention is mic.day_totals_retention: the days written are
	// those the processor still keeps.
	DayTotalsRetention time.Duration
	// BatchSize bounds the users per transaction (default DefaultBatchSize).
	BatchSize int
	// TransactionalID is the bootstrap's own (default
	// MicGroup + "-totals-bootstrap"): a second bootstrap fences the first.
	TransactionalID string
	// Frames frames the totals topics' values as the mic processor does
	// (kafka.public_wire_format): plain, or in confluent mode under the
	// topics' schema ids, never plain then.
	Frames schemareg.Frames
	// Idle bounds the wait for a record below a committed end.
	Idle time.Duration
	Now  func() time.Time
	Log  *slog.Logger

	// crashAfter > 0 (tests): stop after that many commits, leaving the
	// next transaction open, as a crash would.
	crashAfter int
	// betweenCommits (tests) runs after each committed transaction.
	betweenCommits func()
}

// ConfigFrom maps the application's keys.
func ConfigFrom(app *config.Config, log *slog.Logger) Config {
	t := app.Kafka.Topics
	return Config{Kafka: app.Kafka.Cluster(nil, log), Input: t.UserMicEvents, Changelog: t.MicStateChangelog, Ledger: t.MicLedger,
		DailyTotals: t.MicDailyTotals, LifetimeTotals: t.MicLifetimeTotals, MicGroup: app.Process.MicGroup,
		SinkGroup: app.Sink.Group, DayTotalsRetention: app.Mic.DayTotalsRetention.D(), Log: log}
}

func (c *Config) setDefaults() {
	cfgerr.Default(&c.BatchSize, DefaultBatchSize)
	cfgerr.Default(&c.TransactionalID, c.MicGroup+"-totals-bootstrap")
	cfgerr.Default(&c.Idle, 30*time.Second)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
}

// RefusedError is a precondition that stopped the bootstrap before it
// wrote anything (or, for the group check, before its next transaction).
type RefusedError struct{ Msg string }

func (e *RefusedError) Error() string { return "totals bootstrap refused: " + e.Msg }

// Result is what a bootstrap did.
type Result struct {
	Partitions, AlreadyMarked int   // input partitions; of them skipped as marked before
	Users, Days               int   // totals written
	Transactions              int   // committed
	FirstDay                  int64 // the markers' first day
	Elapsed                   time.Duration
}

// FirstDate is the first UTC date daily totals were written for.
func (r Result) FirstDate() string { return mic.DayDate(r.FirstDay) }

// Bootstrap runs it: see the package comment.
func Bootstrap(ctx context.Context, cfg Config, db *sql.DB) (Result, error) {
	cfg.setDefaults()
	start := time.Now()
	var res Result
	cl, err := cfg.Kafka.NewClient("totals-bootstrap", kgo.TransactionalID(cfg.TransactionalID),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionTimeout(time.Minute))
	if err != nil {
		return res, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	parts, err := partitions(ctx, adm, cfg.Input, cfg.Changelog, cfg.DailyTotals, cfg.LifetimeTotals)
	if err != nil {
		return res, err
	}
	daily, err := cfg.Frames.For(cfg.DailyTotals, (&userv1.UserMicDailyTotals{}).ProtoReflect().Descriptor())
	if err != nil {
		return res, err
	}
	life, err := cfg.Frames.For(cfg.LifetimeTotals, (&userv1.UserMicLifetimeTotals{}).ProtoReflect().Descriptor())
	if err != nil {
		return res, err
	}
	res.Partitions = int(parts[cfg.Input])
	if parts[cfg.Changelog] < parts[cfg.Input] {
		return res, &RefusedError{Msg: fmt.Sprintf("the changelog %s has %d partitions, fewer than the input %s's %d",
			cfg.Changelog, parts[cfg.Changelog], cfg.Input, parts[cfg.Input])}
	}
	if err := groupEmpty(ctx, adm, cfg.MicGroup); err != nil {
		return res, err
	}
	progress, err := groupProgress(ctx, adm, cfg.MicGroup)
	if err != nil {
		return res, err
	}
	if err := sinkCaughtUp(ctx, cfg, db); err != nil {
		return res, err
	}
	marked, err := markedPartitions(ctx, cfg)
	if err != nil {
		return res, err
	}
	res.AlreadyMarked = len(marked)
	nowMs := cfg.Now().UnixMilli()
	res.FirstDay = mic.DayOf(nowMs-cfg.DayTotalsRetention.Milliseconds()) - 1
	w := &writer{cfg: cfg, cl: cl, adm: adm, parts: parts, marked: marked, res: &res, progress: progress,
		frames: map[string]envelope.Framing{cfg.DailyTotals: daily, cfg.LifetimeTotals: life}}
	if err := scanUsers(ctx, db, mic.DayDate(res.FirstDay), w.add); err != nil {
		w.abort()
		return res, err
	}
	if err := w.finish(ctx); err != nil {
		return res, err
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

// partitions are the partition counts of topics (each must exist).
func partitions(ctx context.Context, adm *kadm.Client, topics ...string) (map[string]int32, error) {
	td, err := adm.ListTopics(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("totals bootstrap: list topics: %w", err)
	}
	out := map[string]int32{}
	for _, t := range topics {
		d, ok := td[t]
		if !ok || d.Err != nil || len(d.Partitions) == 0 {
			return nil, &RefusedError{Msg: fmt.Sprintf("topic %s does not exist (run roomflow topics)", t)}
		}
		out[t] = int32(len(d.Partitions))
	}
	return out, nil
}

// groupEmpty refuses while the mic processor's group has members: a
// running processor would miss what the bootstrap writes to its state.
func groupEmpty(ctx context.Context, adm *kadm.Client, group string) error {
	groups, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		return fmt.Errorf("totals bootstrap: describe group %s: %w", group, err)
	}
	if g, ok := groups[group]; ok && g.Err == nil && len(g.Members) > 0 {
		return &RefusedError{Msg: fmt.Sprintf("the mic processor's group %s (process.mic_group) has %d members (state %s): scale roomflow process to 0 first",
			group, len(g.Members), g.State)}
	}
	return nil
}

// groupProgress is the mic group's committed offsets, as "topic/partition
// offset" lines: a processor that ran since they were read (and left
// before a membership check saw it) has moved them.
func groupProgress(ctx context.Context, adm *kadm.Client, group string) (string, error) {
	offs, err := adm.FetchOffsets(ctx, group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return "", nil // a group that never committed (some brokers answer so)
	}
	if err != nil {
		return "", fmt.Errorf("totals bootstrap: committed offsets of group %s: %w", group, err)
	}
	var b []byte
	for _, o := range offs.Sorted() { // Each's map order differs call to call
		b = fmt.Appendf(b, "%s/%d %d\n", o.Topic, o.Partition, o.At)
	}
	return string(b), nil
}

// sinkCaughtUp refuses while the mic ledger holds a committed data record
// at or after the sink's stored offset of its partition: its deltas are
// not in the facts yet.
func sinkCaughtUp(ctx context.Context, cfg Config, db *sql.DB) error {
	stored, err := mysqlsink.StoredOffsets(ctx, db, cfg.SinkGroup, cfg.Ledger)
	if err != nil {
		return fmt.Errorf("totals bootstrap: %w", err)
	}
	var behind *RefusedError
	newClient := func(opts ...kgo.Opt) (*kgo.Client, error) { return cfg.Kafka.NewClient("totals-bootstrap", opts...) }
	err = kafkax.ReadCommitted(ctx, newClient, kafkax.Offsets{cfg.Ledger: stored}, cfg.Idle, kafkax.DataRecords(func(r *kgo.Record) (bool, error) {
		behind = &RefusedError{Msg: fmt.Sprintf("the sink (sink.group %s) has not applied %s partition %d from offset %d (its stored offset %d): wait until the sink has applied the whole ledger",
			cfg.SinkGroup, cfg.Ledger, r.Partition, r.Offset, stored[r.Partition])}
		return true, nil
	}), cfg.Ledger)
	if err != nil {
		return fmt.Errorf("totals bootstrap: read %s: %w", cfg.Ledger, err)
	}
	if behind != nil {
		return behind
	}
	return nil
}

// markedPartitions reads the changelog for the partitions already marked.
func markedPartitions(ctx context.Context, cfg Config) (map[int32]bool, error) {
	marked := map[int32]bool{}
	newClient := func(opts ...kgo.Opt) (*kgo.Client, error) { return cfg.Kafka.NewClient("totals-bootstrap", opts...) }
	err := kafkax.ReadCommitted(ctx, newClient, nil, cfg.Idle, kafkax.DataRecords(func(r *kgo.Record) (bool, error) {
		if string(r.Key) == mic.KeyTotalsBootstrap && r.Value != nil {
			marked[r.Partition] = true
		}
		return false, nil
	}), cfg.Changelog)
	if err != nil {
		return nil, fmt.Errorf("totals bootstrap: read %s: %w", cfg.Changelog, err)
	}
	return marked, nil
}

// userTotals is one user's rows.
type userTotals struct {
	app       string
	user      int64
	updatedMs int64
	tot       mic.Totals
	dayUpdMs  []int64 // updated_at_ms of each of tot.Days
}

// writer writes users in transactions of at most cfg.BatchSize users.
type writer struct {
	cfg    Config
	cl     *kgo.Client
	adm    *kadm.Client
	parts  map[string]int32
	marked map[int32]bool
	res    *Result
	recs   []*kgo.Record
	users  int  // in the open batch
	seen   int  // users read, in marked partitions too
	inTxn  bool // a transaction is open
	hash   kgo.TopicPartitioner
	// progress is the mic group's committed offsets when the bootstrap
	// started (groupProgress).
	progress string
	frames   map[string]envelope.Framing // of the totals topics, by topic
}

func (w *writer) partition(topic string, key []byte) int32 {
	if w.hash == nil {
		w.hash = kgo.StickyKeyPartitioner(nil).ForTopic("")
	}
	return int32(w.hash.Partition(&kgo.Record{Key: key}, int(w.parts[topic])))
}

// add queues u's records (unless its partition is marked) and commits a
// full batch.
func (w *writer) add(ctx context.Context, u *userTotals) error {
	w.seen++
	p := w.partition(w.cfg.Input, strconv.AppendInt(nil, u.user, 10))
	if w.marked[p] {
		return nil
	}
	w.recs = append(w.recs, &kgo.Record{Topic: w.cfg.Changelog, Partition: p, Key: []byte(mic.TotalsKey(u.app, u.user)),
		Value: streams.ChangelogValue(u.tot.AppendBinary(nil))})
	w.recs = append(w.recs, publicRecords(w, u)...)
	w.res.Users++
	w.res.Days += len(u.tot.Days)
	if w.users++; w.users >= w.cfg.BatchSize {
		return w.commit(ctx)
	}
	return nil
}

// finish writes the markers of the partitions not marked yet, in the last
// transaction. Over an empty database (a fresh install) no day has
// history, so every day's total counts from 0: the first day is the epoch.
func (w *writer) finish(ctx context.Context) error {
	if w.seen == 0 {
		w.res.FirstDay = 0
	}
	marker := streams.ChangelogValue(mic.EncodeBootstrapMarker(w.res.FirstDay))
	for p := range w.parts[w.cfg.Input] {
		if !w.marked[p] {
			w.recs = append(w.recs, &kgo.Record{Topic: w.cfg.Changelog, Partition: p, Key: []byte(mic.KeyTotalsBootstrap), Value: marker})
		}
	}
	if len(w.recs) == 0 {
		return nil
	}
	return w.commit(ctx)
}

// commit writes the queued records in one transaction, after checking
// that the mic group is still empty and has not moved: a processor that
// ran meanwhile (joined, processed, left between two checks) made
// deltas that the totals already written miss.
func (w *writer) commit(ctx context.Context) error {
	if err := groupEmpty(ctx, w.adm, w.cfg.MicGroup); err != nil {
		return err
	}
	if now, err := groupProgress(ctx, w.adm, w.cfg.MicGroup); err != nil {
		return err
	} else if now != w.progress {
		return &RefusedError{Msg: fmt.Sprintf("the mic processor's group %s (process.mic_group) committed offsets while the bootstrap ran: scale roomflow process to 0, wait for the sink, and run the bootstrap again",
			w.cfg.MicGroup)}
	}
	if err := w.cl.BeginTransaction(); err != nil {
		return fmt.Errorf("totals bootstrap: begin transaction: %w", err)
	}
	w.inTxn = true
	if err := w.cl.ProduceSync(ctx, w.recs...).FirstErr(); err != nil {
		w.abort()
		return fmt.Errorf("totals bootstrap: produce: %w", err)
	}
	if w.cfg.crashAfter > 0 && w.res.Transactions == w.cfg.crashAfter {
		w.inTxn = false // left open, as a crash leaves it
		return errCrashed
	}
	w.inTxn = false
	if err := w.cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return fmt.Errorf("totals bootstrap: commit: %w", err)
	}
	if w.cfg.betweenCommits != nil {
		w.cfg.betweenCommits()
	}
	w.res.Transactions++
	w.cfg.Log.Info("totals bootstrap: transaction committed", "users", w.res.Users, "records", len(w.recs))
	clear(w.recs)
	w.recs, w.users = w.recs[:0], 0
	return nil
}

var errCrashed = fmt.Errorf("totals bootstrap: crashed (test)")

func (w *writer) abort() {
	if w.inTxn {
		w.inTxn = false
		_ = w.cl.EndTransaction(context.Background(), kgo.TryAbort)
	}
}

// scanUsers streams every user's lifetime row with its daily rows from
// firstDate on, app code by app code, each in user_id order: two ordered
// cursors merged on the numeric user_id, so memory does not grow with the
// users. The app codes are read first and the cursors filter on one: a
// merge comparing app codes in Go would disagree with MySQL's collation
// order ("hy_live" sorts before "hyapp" in bytes, after it in
// utf8mb4_general_ci) and drop the other app's daily rows.
func scanUsers(ctx context.Context, db *sql.DB, firstDate string, fn func(context.Context, *userTotals) error) error {
	apps, err := appCodes(ctx, db)
	if err != nil {
		return err
	}
	var u userTotals
	for _, app := range apps {
		if err := scanApp(ctx, db, app, firstDate, &u, fn); err != nil {
			return err
		}
	}
	return nil
}

// appCodes lists the app codes of user_mic_lifetime_stats.
func appCodes(ctx context.Context, db *sql.DB) ([]string, error) {
	rows, err := db.QueryContext(ctx, "SELECT DISTINCT app_code FROM user_mic_lifetime_stats ORDER BY app_code")
	if err != nil {
		return nil, fmt.Errorf("totals bootstrap: read user_mic_lifetime_stats: %w", err)
	}
	defer rows.Close()
	var apps []string
	for rows.Next() {
		var a string
		if err := rows.Scan(&a); err != nil {
			return nil, fmt.Errorf("totals bootstrap: read user_mic_lifetime_stats: %w", err)
		}
		apps = append(apps, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("totals bootstrap: read user_mic_lifetime_stats: %w", err)
	}
	return apps, nil
}

// scanApp is scanUsers for the users of one app code.
func scanApp(ctx context.Context, db *sql.DB, app, firstDate string, u *userTotals, fn func(context.Context, *userTotals) error) error {
	life, err := db.QueryContext(ctx, "SELECT app_code, user_id, seat_occupied_ms, mic_online_ms, session_count, first_mic_at_ms, last_mic_at_ms, updated_at_ms FROM user_mic_lifetime_stats WHERE app_code = ? ORDER BY user_id", app)
	if err != nil {
		return fmt.Errorf("totals bootstrap: read user_mic_lifetime_stats: %w", err)
	}
	defer life.Close()
	days, err := db.QueryContext(ctx, "SELECT app_code, user_id, stat_date, seat_occupied_ms, mic_online_ms, session_count, room_count, first_mic_at_ms, last_mic_at_ms, updated_at_ms FROM user_mic_daily_stats WHERE app_code = ? AND stat_date >= ? ORDER BY user_id, stat_date", app, firstDate)
	if err != nil {
		return fmt.Errorf("totals bootstrap: read user_mic_daily_stats: %w", err)
	}
	defer days.Close()
	var d dayRow
	haveDay, err := d.next(days)
	if err != nil {
		return err
	}
	for life.Next() {
		t := &u.tot
		*t = mic.Totals{Days: t.Days[:0]}
		u.dayUpdMs = u.dayUpdMs[:0]
		if err := life.Scan(&u.app, &u.user, &t.SeatOccupiedMs, &t.MicOnlineMs, &t.SessionCount, &t.FirstMicAtMs, &t.LastMicAtMs, &u.updatedMs); err != nil {
			return fmt.Errorf("totals bootstrap: read user_mic_lifetime_stats: %w", err)
		}
		// Daily rows of users without a lifetime row cannot exist (the
		// sink writes both in one transaction); they are skipped.
		for haveDay && d.user <= u.user {
			if d.user == u.user {
				t.Days = append(t.Days, d.tot)
				u.dayUpdMs = append(u.dayUpdMs, d.updatedMs)
			}
			if haveDay, err = d.next(days); err != nil {
				return err
			}
		}
		if err := fn(ctx, u); err != nil {
			return err
		}
	}
	return life.Err()
}

// dayRow is one user_mic_daily_stats row.
type dayRow struct {
	app       string
	user      int64
	updatedMs int64
	tot       mic.DayTotals
}

func (d *dayRow) next(rows *sql.Rows) (bool, error) {
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return false, fmt.Errorf("totals bootstrap: read user_mic_daily_stats: %w", err)
		}
		return false, nil
	}
	var date string
	t := &d.tot
	if err := rows.Scan(&d.app, &d.user, &date, &t.SeatOccupiedMs, &t.MicOnlineMs, &t.SessionCount, &t.RoomCount,
		&t.FirstMicAtMs, &t.LastMicAtMs, &d.updatedMs); err != nil {
		return false, fmt.Errorf("totals bootstrap: read user_mic_daily_stats: %w", err)
	}
	day, err := time.Parse(time.DateOnly, date)
	if err != nil {
		return false, fmt.Errorf("totals bootstrap: user_mic_daily_stats stat_date %q: %w", date, err)
	}
	t.Day = mic.DayOf(day.UnixMilli())
	return true, nil
}

// publicRecords are u's totals for the totals topics, keyed and with
// headers as the processor writes them; the event ids name the bootstrap.
func publicRecords(w *writer, u *userTotals) []*kgo.Record {
	userKey := u.app + ":" + strconv.FormatInt(u.user, 10)
	out := make([]*kgo.Record, 0, len(u.tot.Days)+1)
	for i, d := range u.tot.Days {
		date := mic.DayDate(d.Day)
		m := &userv1.UserMicDailyTotals{EventId: mic.EventTypeDailyTotals + "Bootstrap:" + userKey + ":" + date,
			AppCode: u.app, UserId: u.user, StatDate: date, SeatOccupiedMs: d.SeatOccupiedMs, MicOnlineMs: d.MicOnlineMs,
			SessionCount: d.SessionCount, RoomCount: d.RoomCount, FirstMicAtMs: d.FirstMicAtMs, LastMicAtMs: d.LastMicAtMs,
			UpdatedAtMs: u.dayUpdMs[i]}
		f := w.frames[w.cfg.DailyTotals]
		out = append(out, w.record(w.cfg.DailyTotals, userKey+":"+date, m.EventId, mic.EventTypeDailyTotals, u.app,
			mic.AppendDailyTotals(append([]byte(nil), f.Prefix...), m)))
	}
	t := &u.tot
	m := &userv1.UserMicLifetimeTotals{EventId: mic.EventTypeLifetimeTotals + "Bootstrap:" + userKey, AppCode: u.app,
		UserId: u.user, SeatOccupiedMs: t.SeatOccupiedMs, MicOnlineMs: t.MicOnlineMs, SessionCount: t.SessionCount,
		FirstMicAtMs: t.FirstMicAtMs, LastMicAtMs: t.LastMicAtMs, UpdatedAtMs: u.updatedMs}
	f := w.frames[w.cfg.LifetimeTotals]
	return append(out, w.record(w.cfg.LifetimeTotals, userKey, m.EventId, mic.EventTypeLifetimeTotals, u.app,
		mic.AppendLifetimeTotals(append([]byte(nil), f.Prefix...), m)))
}

// record is a totals record of topic; value starts with the topic's
// framing prefix, which its content-type header names.
func (w *writer) record(topic, key, eventID, eventType, app string, value []byte) *kgo.Record {
	k := []byte(key)
	return &kgo.Record{Topic: topic, Partition: w.partition(topic, k), Key: k, Value: value,
		Headers: envelope.AppendHeadersAs(nil, []byte(eventID), []byte(eventType), []byte(app), w.frames[topic].Header())}
}
