// Package retention is `roomflow purge`: one pass that deletes the rows
// roomflow's tables no longer need, in small batches, and returns.
//
// What it deletes:
//
//   - Consumption rows (the MySQL sink's dedupe record: one row per source
//     event applied) older than their table's window, measured on the
//     sink's processing time (user_mic_event_consumption.updated_at_ms,
//     lucky_pool_inflow_consumption.created_at_ms,
//     lucky_event_consumption.created_at_ms: written once, with the batch
//     time, indexed by migration 0007). A record the sink sees again after
//     its row is gone is applied again: its facts count twice. That is the
//     replay window this leaves, so Validate refuses a window shorter than
//     the Kafka retention of the topics its table dedupes (Window.Replay):
//     a record whose row is purged can then no longer be read back from
//     Kafka by a lagging or reset consumer. A re-driven dead letter or a
//     hand-made replay of older records still can: do not re-drive records
//     older than the window.
//
//   - Only with RoomOutbox.Enabled (room-service owns room_outbox), its
//     delivered rows older than RoomOutbox.Age that the relay has passed:
//     ids below the relay's lowest open hole and at most its high-water id
//     (Config.RelayedBelow). "delivered" alone is not enough: the IM
//     compensation scan delivers rows the relay has not relayed yet, and a
//     row deleted before the relay reads it is never relayed.
//
//   - The room-level lucky facts, lucky_room_stats_hourly, by hour: the
//     hours that ended longer than LuckyRoomStatsHourly ago (a per-room
//     signal for operators, not a record anyone reconciles against).
//
// It never touches any other table: lucky_draw_records and lucky_outbox
// (the draw service's audit trail and reward outbox, LUCKY-9 and LUCKY-10)
// in particular, nor the other
// fact tables, lucky_pool_inflow_claims or roomflow_sink_offsets.
//
// Each batch is one autocommit DELETE of at most BatchSize rows (by the
// window's index; room_outbox by primary-key range), so no statement holds
// its locks longer than one small delete, and the sink and the relay keep
// running alongside; BatchPause between batches leaves the server room.
// Deleted rows count in roomflow_purge_deleted_rows_total{table}.
package retention

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyapp/roomflow/internal/backoff"
	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/promreg"
)

// Table names purge deletes from.
const (
	UserMicEventConsumption    = "user_mic_event_consumption"
	LuckyPoolInflowConsumption = "lucky_pool_inflow_consumption"
	LuckyEventConsumption      = "lucky_event_consumption"
	LuckyRoomStatsHourly       = "lucky_room_stats_hourly"
	RoomOutbox                 = "room_outbox"
)

// Defaults of Config.
const (
	DefaultBatchSize  = 1000
	DefaultBatchPause = 10 * time.Millisecond
	// DefaultWindow is the default window of each consumption table.
	DefaultWindow = 30 * 24 * time.Hour
	// DefaultRoomOutboxAge is the default age of delivered room_outbox rows.
	DefaultRoomOutboxAge = 7 * 24 * time.Hour
	// DefaultLuckyRoomStatsHourly is the default age of the room facts.
	DefaultLuckyRoomStatsHourly = 90 * 24 * time.Hour
)

// Window is how long one consumption table keeps its rows.
type Window struct {
	// Age: rows whose processing time is older are deleted; 0 keeps the
	// table whole (it is not purged).
	Age time.Duration
	// Replay is the longest time a record of a topic this table dedupes
	// can still be read back from Kafka (the topics' retention.ms, plus
	// segment.ms: Kafka deletes whole segments); Age
	// must be at least that. 0 or negative: the records are kept forever,
	// so the table must not be purged (Age 0).
	Replay time.Duration
}

// RoomOutboxConfig is the room_outbox purge, off by default.
type RoomOutboxConfig struct {
	Enabled bool
	// Age: delivered rows created longer ago are deleted (default
	// DefaultRoomOutboxAge).
	Age time.Duration
}

// Config configures a Purger (New).
type Config struct {
	// Windows of the consumption tables; the zero Window keeps its table.
	UserMicEventConsumption    Window
	LuckyPoolInflowConsumption Window
	LuckyEventConsumption      Window
	// LuckyRoomStatsHourly: room hours that ended longer ago are deleted;
	// 0 keeps the table. A fact table dedupes nothing, so no replay bound.
	LuckyRoomStatsHourly time.Duration
	RoomOutbox           RoomOutboxConfig
	// RelayedBelow returns the id below which every room_outbox row has
	// been relayed (the relay's lowest open hole, else its high-water id
	// + 1); ok false when the relay has no position yet (nothing is then
	// purged from room_outbox). Required when RoomOutbox.Enabled.
	RelayedBelow func(ctx context.Context) (below uint64, ok bool, err error)
	// BatchSize is the most rows one DELETE removes (default
	// DefaultBatchSize).
	BatchSize int
	// BatchPause is the sleep between two batches of one table (default
	// DefaultBatchPause; negative: none).
	BatchPause time.Duration
	// DryRun counts what would be deleted and deletes nothing.
	DryRun bool
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Registerer gets roomflow_purge_deleted_rows_total (nil: none).
	Registerer prometheus.Registerer
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	cfgerr.Default(&c.BatchSize, DefaultBatchSize)
	cfgerr.Default(&c.BatchPause, DefaultBatchPause)
	cfgerr.Default(&c.RoomOutbox.Age, DefaultRoomOutboxAge)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// maxBatchSize bounds one DELETE: larger ones hold their row locks (and
// grow the undo log) for longer than "small batches" means.
const maxBatchSize = 100000

// Validate names the problems by field: "user_mic_event_consumption"
// (and the other tables), "room_outbox.age", "relayed_below",
// "batch_size".
func (c Config) Validate() error {
	c.setDefaults()
	var ch cfgerr.Checks
	for _, t := range c.tables() {
		w := t.window
		switch {
		case w.Age < 0:
			ch.Bad(t.name, "must be >= 0 (0 keeps the table; got %s)", w.Age)
		case w.Age == 0:
		case t.fact:
			if w.Age < time.Hour {
				ch.Bad(t.name, "must be 0 or at least 1h, the facts' grain (got %s)", w.Age)
			}
		case w.Replay <= 0:
			ch.Bad(t.name, "must be 0: the topics this table dedupes keep their records forever, so a replay older than any window would count twice")
		case w.Age < w.Replay:
			ch.Bad(t.name, "must be at least the Kafka retention of the topics it dedupes (%s, got %s): a record replayed after its row is purged counts twice", w.Replay, w.Age)
		}
	}
	if c.RoomOutbox.Enabled {
		ch.PositiveDuration("room_outbox.age", c.RoomOutbox.Age)
		if c.RelayedBelow == nil {
			ch.Bad("relayed_below", "must be set when room_outbox is purged")
		}
	}
	if c.BatchSize <= 0 || c.BatchSize > maxBatchSize {
		ch.Bad("batch_size", "must be 1..%d (got %d)", maxBatchSize, c.BatchSize)
	}
	return ch.Err()
}

// aged is a table purged by age and the indexed column its age is read
// from (the consumption tables' by migration 0007): a consumption table,
// or a fact table (fact) whose column is the start of its hour.
type aged struct {
	name, column string
	window       Window
	fact         bool
}

func (c Config) tables() []aged {
	return []aged{
		{UserMicEventConsumption, "updated_at_ms", c.UserMicEventConsumption, false},
		{LuckyPoolInflowConsumption, "created_at_ms", c.LuckyPoolInflowConsumption, false},
		{LuckyEventConsumption, "created_at_ms", c.LuckyEventConsumption, false},
		{LuckyRoomStatsHourly, "hour_start_ms", Window{Age: c.LuckyRoomStatsHourly}, true},
	}
}

// Purger runs purge passes (Run), one at a time: Run is not safe for
// concurrent use.
type Purger struct {
	cfg     Config
	db      *sql.DB
	deleted *prometheus.CounterVec
	// conn is the pass's one connection, at READ COMMITTED (Run).
	conn *sql.Conn
}

// New validates cfg and returns a Purger on db.
func New(cfg Config, db *sql.DB) (*Purger, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	if db == nil {
		return nil, fmt.Errorf("retention: nil *sql.DB")
	}
	deleted := promreg.Register(cfg.Registerer, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "roomflow_purge_deleted_rows_total",
		Help: "Rows roomflow purge deleted, by table.",
	}, []string{"table"}))
	for _, t := range []string{UserMicEventConsumption, LuckyPoolInflowConsumption, LuckyEventConsumption, LuckyRoomStatsHourly, RoomOutbox} {
		deleted.WithLabelValues(t) // exists at 0 before the first delete
	}
	return &Purger{cfg: cfg, db: db, deleted: deleted}, nil
}

// TableResult is what a pass did to one table.
type TableResult struct {
	Table string
	// Skipped says why the table was left alone ("" when it was purged).
	Skipped string
	// Before is the cutoff: rows older than it (Unix ms) were eligible.
	BeforeMs int64
	// BelowID bounds room_outbox's ids (rows below it were eligible).
	BelowID uint64
	// Rows deleted, or with DryRun the rows that would be.
	Rows    int64
	Batches int
}

// Run makes one pass over every table and returns what it did per table,
// in a stable order. It stops at the first error (what was deleted stays
// deleted: every batch commits on its own) or when ctx ends.
//
// Every statement runs on one connection at READ COMMITTED: a DELETE then
// locks only the rows it deletes (InnoDB releases the others it scanned,
// such as a room_outbox row the IM publisher is claiming, at once) and
// takes no gap locks, so the sink's inserts never wait for it.
func (p *Purger) Run(ctx context.Context) ([]TableResult, error) {
	conn, err := p.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("retention: connect: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"); err != nil {
		return nil, fmt.Errorf("retention: set isolation: %w", err)
	}
	p.conn = conn
	defer func() { p.conn = nil }()
	var out []TableResult
	now := p.cfg.Now()
	for _, t := range p.cfg.tables() {
		res := TableResult{Table: t.name}
		if t.window.Age == 0 {
			res.Skipped = "window 0"
			out = append(out, res)
			continue
		}
		res.BeforeMs = now.Add(-t.window.Age).UnixMilli()
		if t.fact {
			res.BeforeMs -= hourMs // an hour whose end is older than the window
		}
		err := p.byAge(ctx, t, &res)
		out = append(out, res)
		if err != nil {
			return out, err
		}
	}
	res := TableResult{Table: RoomOutbox}
	if !p.cfg.RoomOutbox.Enabled {
		res.Skipped = "room_outbox.enabled is false"
		return append(out, res), nil
	}
	res.BeforeMs = now.Add(-p.cfg.RoomOutbox.Age).UnixMilli()
	err = p.roomOutbox(ctx, &res)
	return append(out, res), err
}

// hourMs is the grain of the fact tables purged by hour.
const hourMs = int64(time.Hour / time.Millisecond)

// byAge deletes t's rows older than res.BeforeMs, a batch at a time.
func (p *Purger) byAge(ctx context.Context, t aged, res *TableResult) error {
	where := " FROM " + t.name + " WHERE " + t.column + " < ?"
	if p.cfg.DryRun {
		return p.count(ctx, res, "SELECT COUNT(*)"+where, res.BeforeMs)
	}
	q := "DELETE" + where + " ORDER BY " + t.column + " LIMIT ?"
	for {
		n, err := p.exec(ctx, res, q, res.BeforeMs, p.cfg.BatchSize)
		if err != nil || n < int64(p.cfg.BatchSize) {
			return err
		}
		if err := p.pause(ctx); err != nil {
			return err
		}
	}
}

// roomOutbox deletes delivered rows created before res.BeforeMs with ids
// below the relay's bound, walking the primary key in ranges of BatchSize
// ids from the lowest id, so each DELETE locks at most one range however
// many old rows are not delivered. It stops at the bound, or at the first
// range whose rows were all created after the cutoff (ids grow with
// time; a straggler waits for the next pass).
func (p *Purger) roomOutbox(ctx context.Context, res *TableResult) error {
	below, ok, err := p.cfg.RelayedBelow(ctx)
	if err != nil {
		return fmt.Errorf("retention: room_outbox: relay position: %w", err)
	}
	if !ok {
		res.Skipped = "the relay has no committed position"
		return nil
	}
	res.BelowID = below
	var lowest sql.NullInt64
	if err := p.conn.QueryRowContext(ctx, "SELECT MIN(id) FROM room_outbox").Scan(&lowest); err != nil {
		return fmt.Errorf("retention: room_outbox: lowest id: %w", err)
	}
	if !lowest.Valid {
		return nil
	}
	const cond = " FROM room_outbox WHERE id >= ? AND id < ? AND status = 'delivered' AND created_at_ms < ?"
	step := uint64(p.cfg.BatchSize)
	for lo := uint64(lowest.Int64); lo < below; lo += step {
		hi := min(below, lo+step)
		var oldest sql.NullInt64
		if err := p.conn.QueryRowContext(ctx, "SELECT MIN(created_at_ms) FROM room_outbox WHERE id >= ? AND id < ?", lo, hi).Scan(&oldest); err != nil {
			return fmt.Errorf("retention: room_outbox: %w", err)
		}
		if oldest.Valid && oldest.Int64 >= res.BeforeMs {
			return nil
		}
		if !oldest.Valid {
			continue // an empty range (purged before, or ids never used)
		}
		if p.cfg.DryRun {
			if err := p.count(ctx, res, "SELECT COUNT(*)"+cond, lo, hi, res.BeforeMs); err != nil {
				return err
			}
			continue
		}
		n, err := p.exec(ctx, res, "DELETE"+cond, lo, hi, res.BeforeMs)
		if err != nil {
			return err
		}
		if n > 0 {
			if err := p.pause(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// exec runs one batch's DELETE (autocommit) and counts what it removed.
func (p *Purger) exec(ctx context.Context, res *TableResult, q string, args ...any) (int64, error) {
	r, err := p.conn.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, fmt.Errorf("retention: purge %s: %w", res.Table, err)
	}
	n, err := r.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("retention: purge %s: %w", res.Table, err)
	}
	res.Rows += n
	res.Batches++
	p.deleted.WithLabelValues(res.Table).Add(float64(n))
	if n > 0 {
		p.cfg.Logger.Debug("purge batch", "component", "purge", "table", res.Table, "rows", n)
	}
	return n, nil
}

// count adds what a dry run would delete.
func (p *Purger) count(ctx context.Context, res *TableResult, q string, args ...any) error {
	var n int64
	if err := p.conn.QueryRowContext(ctx, q, args...).Scan(&n); err != nil {
		return fmt.Errorf("retention: count %s: %w", res.Table, err)
	}
	res.Rows += n
	return nil
}

func (p *Purger) pause(ctx context.Context) error { return backoff.Sleep(ctx, p.cfg.BatchPause) }
