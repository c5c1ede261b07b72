// Package rebuild is `roomflow rebuild`: it recomputes the mic fact tables
// (user_mic_sessions, user_mic_daily_stats, user_mic_lifetime_stats) from
// the mic ledger topic into fresh tables and swaps them in, for when
// `roomflow verify` finds the MySQL facts differ from the event log (a
// table edited by hand, a restore from an old backup, a bug fixed since).
//
// It reuses the sink's own code: micledger.Decode for every record and
// micledger.BuildFacts and WriteFacts (the sink's statements, pointed at
// the fresh tables) for every batch, so the rebuilt tables are what the
// sink would have written into empty tables. It reads each partition of
// the ledger from offset 0 up to the sink's committed position
// (roomflow_sink_offsets of Config.Group): exactly the records the sink
// has applied, skipping the ones it dead-lettered (a decode error) and
// every repeat of an event id (the first one counts, as in the sink's
// consumption table). The fresh tables then equal what the facts must be
// at those positions, the consumption tables and the positions stay as
// they are, and the sink resumes on the rebuilt tables after the swap.
//
// With Config.InflowTopic it rebuilds lucky_pools the same way from the
// lucky pool inflow topic (luckyinflow.Decode, Decide, BuildPools and
// WritePools), but only while the stream owns the pools (no
// lucky_pool_owner row): once `roomflow lucky` owns them, draws pay out of
// them in transactions no topic replays, and rebuild leaves them alone.
// What operators set (reserve_floor, funded) and total_out are copied from
// the live rows, so balance = funded + total_in - total_out; version
// restarts (one per batch). lucky_pool_inflow_daily and the claims are
// not rebuilt.
//
// Preconditions, checked before anything is written:
//   - the sink is stopped: its consumer group has no member (a sink
//     applying records meanwhile would write facts into the tables being
//     replaced, lost at the swap);
//   - the ledger still holds its whole history: every partition starts at
//     offset 0 (retention.ms=-1 on the mic ledger topic); records deleted
//     by retention cannot be recomputed, and rebuild refuses rather than
//     produce smaller totals;
//   - the group has positions on the topic, unless the live tables hold
//     no row the stream wrote (a wrong group would swap in empty tables);
//   - no <table>__old is left from an earlier rebuild.
//
// Just before the swap it checks again that the group has no member, that
// the sink's positions did not move (a sink run meanwhile wrote facts into
// the live tables that the swap would discard), and that lucky_pools is
// still the stream's with the reserve_floor, funded and total_out it
// copied.
//
// The swap is one RENAME TABLE of the three pairs (atomic: a reader sees
// either every old table or every new one). The replaced tables stay as
// <table>__old for inspection; drop them when satisfied. Leftover
// <table>__rebuild tables from an interrupted run are dropped and filled
// again. The in-memory dedupe holds every event id of the ledger (about
// 100 bytes each).
package rebuild

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/schemas/userv1"
	mysqlsink "github.com/hyapp/roomflow/sinks/mysql"
	"github.com/hyapp/roomflow/sinks/mysql/luckyinflow"
	"github.com/hyapp/roomflow/sinks/mysql/micledger"
)

// Suffixes of the fresh and the replaced tables.
const (
	FreshSuffix = "__rebuild"
	OldSuffix   = "__old"
)

// Defaults of Config.
const (
	DefaultBatchSize = 2000
	DefaultIdle      = 30 * time.Second
)

// Config configures a rebuild (Run).
type Config struct {
	// Group is the sink's consumer group: its members must be gone and its
	// positions in roomflow_sink_offsets bound what is read (default
	// mysqlsink.DefaultGroup).
	Group string
	// LedgerTopic is the mic ledger topic (required).
	LedgerTopic string
	// InflowTopic is the lucky pool inflow topic: lucky_pools is rebuilt
	// from it while the stream owns them (no lucky_pool_owner row).
	// Empty: lucky_pools is left alone.
	InflowTopic string
	// DefaultAppCode is the app_code of an entry that has none, as the
	// sink's (its app_code key).
	DefaultAppCode string
	// BatchSize is the entries applied per transaction into the fresh
	// tables (default DefaultBatchSize).
	BatchSize int
	// Idle bounds the wait for a record below the sink's position (default
	// DefaultIdle): a ledger that cannot deliver what the sink applied is
	// an error.
	Idle time.Duration
	// Kafka is the cluster (required).
	Kafka kafkax.Cluster
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	cfgerr.Default(&c.Group, mysqlsink.DefaultGroup)
	cfgerr.Default(&c.BatchSize, DefaultBatchSize)
	cfgerr.Default(&c.Idle, DefaultIdle)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate names the problems by field: "ledger_topic", "batch_size",
// "idle", "kafka.brokers", "default_app_code".
func (c Config) Validate() error {
	c.setDefaults()
	var ch cfgerr.Checks
	ch.Topic("ledger_topic", c.LedgerTopic)
	if c.InflowTopic != "" {
		ch.Topic("inflow_topic", c.InflowTopic)
	}
	ch.Positive("batch_size", c.BatchSize)
	ch.PositiveDuration("idle", c.Idle)
	if len(c.DefaultAppCode) > mysqlsink.MaxAppCode {
		ch.Bad("default_app_code", "must be at most %d bytes (got %d)", mysqlsink.MaxAppCode, len(c.DefaultAppCode))
	}
	ch.Add(cfgerr.Under("kafka", nil, c.Kafka.Validate()))
	return ch.Err()
}

// PreconditionError is a check that stopped the rebuild before it wrote
// anything.
type PreconditionError struct{ Msg string }

func (e *PreconditionError) Error() string { return "rebuild: " + e.Msg }

// Result is what a rebuild did.
type Result struct {
	// Entries read from the ledger below the sink's positions; Applied
	// are the first of their event id, Repeats the others, Invalid the
	// ones the sink dead-lettered.
	Entries, Applied, Repeats, Invalid int
	// Inflows are the distinct inflows read for lucky_pools (InvalidInflows
	// the ones the sink dead-lettered); PoolsSkipped says why lucky_pools
	// was not rebuilt although Config.InflowTopic was set.
	Inflows, InvalidInflows int
	PoolsSkipped            string
	// Rows per rebuilt table.
	Rows map[string]int64
	// Old are the replaced tables, kept for inspection.
	Old []string
}

// target is one input topic and the tables rebuilt from it.
type target struct {
	topic string
	// live tables and their fresh copies, in the same order.
	live, fresh []string
	// streamRows is a condition true of the first live table's rows the
	// stream wrote.
	streamRows string
	// seed fills the fresh tables (after CREATE ... LIKE) with what the
	// stream does not determine; nil: they start empty. seedHeld, run
	// just before the swap, fails when the live tables changed what seed
	// copied (the swap would undo it).
	seed, seedHeld func(ctx context.Context, db *sql.DB) error
	// record handles one data record below the sink's position; flush
	// writes what records gathered, in the transaction tx.
	record func(r *kgo.Record)
	flush  func(ctx context.Context, tx *mysqlsink.Tx) error
	// pending is how many items record gathered since the last flush.
	pending func() int
	// ends is the sink's position per partition (apply empties it);
	// applied keeps it for the check before the swap.
	ends, applied map[int32]int64
}

// Run rebuilds the mic fact tables of db, and lucky_pools when
// Config.InflowTopic is set and the stream owns them (see the package
// doc). It stops at the first error; before the swap the live tables are
// untouched.
func Run(ctx context.Context, cfg Config, db *sql.DB) (Result, error) {
	res := Result{Rows: map[string]int64{}}
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	cfg.setDefaults()
	targets := []*target{micTarget(cfg, &res)}
	if cfg.InflowTopic != "" {
		owned, err := luckyinflow.Owned(ctx, db)
		if err != nil {
			return res, fmt.Errorf("rebuild: %w", err)
		}
		if owned {
			res.PoolsSkipped = "roomflow lucky owns lucky_pools (lucky_pool_owner): draws pay out of them, so the inflow stream alone cannot recompute them"
		} else {
			targets = append(targets, poolsTarget(cfg, &res))
		}
	}
	if err := check(ctx, cfg, db, targets); err != nil {
		return res, err
	}
	for _, tg := range targets {
		for i, t := range tg.live {
			f := tg.fresh[i]
			for _, q := range []string{"DROP TABLE IF EXISTS " + f, "CREATE TABLE " + f + " LIKE " + t} {
				if _, err := db.ExecContext(ctx, q); err != nil {
					return res, fmt.Errorf("rebuild: %s: %w", q, err)
				}
			}
		}
		if tg.seed != nil {
			if err := tg.seed(ctx, db); err != nil {
				return res, err
			}
		}
		if err := apply(ctx, cfg, db, tg); err != nil {
			return res, err
		}
	}
	if err := unchanged(ctx, cfg, db, targets); err != nil {
		return res, err
	}
	var pairs []string
	for _, tg := range targets {
		for i, t := range tg.live {
			var n int64
			if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+tg.fresh[i]).Scan(&n); err != nil {
				return res, fmt.Errorf("rebuild: count %s: %w", tg.fresh[i], err)
			}
			res.Rows[t] = n
			pairs = append(pairs, t+" TO "+t+OldSuffix, tg.fresh[i]+" TO "+t)
			res.Old = append(res.Old, t+OldSuffix)
		}
	}
	if _, err := db.ExecContext(ctx, "RENAME TABLE "+strings.Join(pairs, ", ")); err != nil {
		return res, fmt.Errorf("rebuild: swap: %w", err)
	}
	cfg.Logger.Info("fact tables rebuilt and swapped in", "component", "rebuild", "entries", res.Entries,
		"applied", res.Applied, "repeats", res.Repeats, "invalid", res.Invalid, "inflows", res.Inflows, "old_tables", res.Old)
	return res, nil
}

// firstOfID admits the first item of each event id, as the sink's
// consumption tables do.
type firstOfID map[mysqlsink.EventKey]struct{}

func (f firstOfID) admit(appCode, eventID string) bool {
	k := mysqlsink.EventKey{AppCode: appCode, EventID: eventID}
	if _, dup := f[k]; dup {
		return false
	}
	f[k] = struct{}{}
	return true
}

// micTarget rebuilds the mic fact tables from the ledger: the first entry
// of each event id, as the sink's consumption table admits it.
func micTarget(cfg Config, res *Result) *target {
	live := micledger.FactTables
	fresh := micledger.Tables{Sessions: live.Sessions + FreshSuffix, Daily: live.Daily + FreshSuffix, Lifetime: live.Lifetime + FreshSuffix}
	seen := firstOfID{}
	var batch []*userv1.MicLedgerEntry
	return &target{
		topic: cfg.LedgerTopic, live: live.List(), fresh: fresh.List(), streamRows: "TRUE",
		record: func(r *kgo.Record) {
			res.Entries++
			e, err := micledger.Decode(r.Value, cfg.DefaultAppCode)
			if err != nil {
				res.Invalid++ // the sink dead-lettered it
				return
			}
			if !seen.admit(e.AppCode, e.EventId) {
				res.Repeats++
				return
			}
			res.Applied++
			batch = append(batch, e)
		},
		pending: func() int { return len(batch) },
		flush: func(ctx context.Context, tx *mysqlsink.Tx) error {
			f, err := micledger.BuildFacts(batch)
			batch = batch[:0]
			if err != nil {
				return err
			}
			return micledger.WriteFacts(ctx, tx, f, fresh)
		},
	}
}

// poolsTarget rebuilds lucky_pools from the inflow topic while the stream
// owns them: the first inflow of each event id, added unless an earlier
// one named its draw (luckyinflow.Decide, unowned), on top of what
// operators set (reserve_floor, funded; total_out, 0 while unowned), so
// balance = funded + total_in - total_out.
func poolsTarget(cfg Config, res *Result) *target {
	live, fresh := luckyinflow.PoolsTable, luckyinflow.PoolsTable+FreshSuffix
	seen := firstOfID{}
	claims := map[luckyinflow.DrawKey]string{}
	var batch []*activityv1.LuckyPoolInflow
	return &target{
		topic: cfg.InflowTopic, live: []string{live}, fresh: []string{fresh}, streamRows: "total_in <> 0",
		seed: func(ctx context.Context, db *sql.DB) error {
			if _, err := db.ExecContext(ctx, "INSERT INTO "+fresh+" (app_code, scope_type, scope_id, reserve_floor, funded, total_out, balance) "+
				"SELECT app_code, scope_type, scope_id, reserve_floor, funded, total_out, funded - total_out FROM "+live); err != nil {
				return fmt.Errorf("rebuild: seed %s: %w", fresh, err)
			}
			return nil
		},
		seedHeld: func(ctx context.Context, db *sql.DB) error {
			owned, err := luckyinflow.Owned(ctx, db)
			if err != nil {
				return fmt.Errorf("rebuild: %w", err)
			}
			if owned {
				return &PreconditionError{Msg: "roomflow lucky took lucky_pools over during the rebuild (lucky_pool_owner): its draws' payouts would be undone by the swap; nothing was swapped: run rebuild again (it then leaves lucky_pools alone)"}
			}
			var n int
			if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+live+" l LEFT JOIN "+fresh+
				" f ON f.app_code = l.app_code AND f.scope_type = l.scope_type AND f.scope_id = l.scope_id "+
				"WHERE f.app_code IS NULL OR f.reserve_floor <> l.reserve_floor OR f.funded <> l.funded OR f.total_out <> l.total_out").Scan(&n); err != nil {
				return fmt.Errorf("rebuild: compare %s: %w", live, err)
			}
			if n > 0 {
				return &PreconditionError{Msg: fmt.Sprintf("%d lucky_pools rows changed reserve_floor, funded or total_out during the rebuild (lucky pools fund?): the swap would undo it; nothing was swapped: run rebuild again", n)}
			}
			return nil
		},
		record: func(r *kgo.Record) {
			in, err := luckyinflow.DecodeRecord(r, cfg.DefaultAppCode)
			if err != nil {
				res.InvalidInflows++
				return
			}
			if !seen.admit(in.AppCode, in.EventId) {
				return
			}
			res.Inflows++
			batch = append(batch, in)
		},
		pending: func() int { return len(batch) },
		flush: func(ctx context.Context, tx *mysqlsink.Tx) error {
			var added []*activityv1.LuckyPoolInflow
			for i, st := range luckyinflow.Decide(batch, false, claims) {
				if st != luckyinflow.StatusConsumed {
					continue
				}
				added = append(added, batch[i])
				if batch[i].DrawId != "" {
					claims[luckyinflow.DrawKey{AppCode: batch[i].AppCode, DrawID: batch[i].DrawId}] = luckyinflow.ClaimedByStream
				}
			}
			batch = batch[:0]
			pools, err := luckyinflow.BuildPools(added)
			if err != nil {
				return err
			}
			return luckyinflow.WritePools(ctx, tx, pools, fresh)
		},
	}
}

// check verifies every precondition before anything is written: the
// sink's group is empty, every target's topic starts at offset 0 wherever
// the sink has applied records (filling in the targets' positions), and
// no __old table is left.
func check(ctx context.Context, cfg Config, db *sql.DB, targets []*target) error {
	cl, err := cfg.Kafka.NewClient("rebuild")
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if err := sinkStopped(ctx, cfg, adm); err != nil {
		return err
	}
	for _, tg := range targets {
		ends, err := appliedUpTo(ctx, cfg, db, tg.topic)
		if err != nil {
			return err
		}
		starts, err := adm.ListStartOffsets(ctx, tg.topic)
		if err == nil {
			err = starts.Error()
		}
		if err != nil {
			return fmt.Errorf("rebuild: list start offsets of %s: %w", tg.topic, err)
		}
		for p, end := range ends {
			s, ok := starts.Lookup(tg.topic, p)
			if !ok {
				return &PreconditionError{Msg: fmt.Sprintf("%s has no partition %d, which the sink has applied up to offset %d", tg.topic, p, end)}
			}
			if s.Offset > 0 {
				return &PreconditionError{Msg: fmt.Sprintf("%s partition %d starts at offset %d: its earlier records are gone (retention), so the facts cannot be recomputed; rebuild needs the whole history (retention.ms=-1)",
					tg.topic, p, s.Offset)}
			}
		}
		tg.ends, tg.applied = ends, maps.Clone(ends)
		if len(ends) == 0 {
			// Nothing applied by this group: rebuilt tables would be
			// empty. Live rows mean another group (a wrong sink.group)
			// wrote them.
			var rows int
			if err := db.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM "+tg.live[0]+" WHERE "+tg.streamRows+")").Scan(&rows); err != nil {
				return fmt.Errorf("rebuild: %w", err)
			}
			if rows > 0 {
				return &PreconditionError{Msg: fmt.Sprintf("roomflow_sink_offsets holds no position of group %s on %s, but %s has rows: is the sink's group (sink.group) right?",
					cfg.Group, tg.topic, tg.live[0])}
			}
		}
		for _, t := range tg.live {
			var n int
			if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?", t+OldSuffix).Scan(&n); err != nil {
				return fmt.Errorf("rebuild: %w", err)
			}
			if n > 0 {
				return &PreconditionError{Msg: fmt.Sprintf("%s is left from an earlier rebuild: drop it (or rename it away) first", t+OldSuffix)}
			}
		}
	}
	return nil
}

// sinkStopped fails when the sink's group has members.
func sinkStopped(ctx context.Context, cfg Config, adm *kadm.Client) error {
	groups, err := adm.DescribeGroups(ctx, cfg.Group)
	if err != nil {
		return fmt.Errorf("rebuild: describe group %s: %w", cfg.Group, err)
	}
	if g, ok := groups[cfg.Group]; ok && g.Err == nil && len(g.Members) > 0 {
		return &PreconditionError{Msg: fmt.Sprintf("the sink's group %s has %d members (state %s): stop every roomflow sink first, or the facts it applies meanwhile are lost at the swap",
			cfg.Group, len(g.Members), g.State)}
	}
	return nil
}

// appliedUpTo is the sink's stored position on topic per partition that
// has applied anything: a partition the sink claimed but never applied a
// record of is stored as -1.
func appliedUpTo(ctx context.Context, cfg Config, db *sql.DB, topic string) (map[int32]int64, error) {
	ends, err := mysqlsink.StoredOffsets(ctx, db, cfg.Group, topic)
	if err != nil {
		return nil, fmt.Errorf("rebuild: %w", err)
	}
	maps.DeleteFunc(ends, func(_ int32, end int64) bool { return end <= 0 })
	return ends, nil
}

// unchanged checks, just before the swap, that no sink joined the group
// or moved its positions since check (facts it applied to the live tables
// meanwhile would go to __old with the swap and never be applied again:
// their consumption rows stay), and that what a seed copied held.
func unchanged(ctx context.Context, cfg Config, db *sql.DB, targets []*target) error {
	cl, err := cfg.Kafka.NewClient("rebuild")
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := sinkStopped(ctx, cfg, kadm.NewClient(cl)); err != nil {
		return err
	}
	for _, tg := range targets {
		now, err := appliedUpTo(ctx, cfg, db, tg.topic)
		if err != nil {
			return err
		}
		if !maps.Equal(now, tg.applied) {
			return &PreconditionError{Msg: fmt.Sprintf("the sink's positions on %s moved during the rebuild (%v, then %v): a sink ran meanwhile, so the rebuilt tables lack what it applied; nothing was swapped: stop every roomflow sink and run rebuild again",
				tg.topic, tg.applied, now)}
		}
		if tg.seedHeld != nil {
			if err := tg.seedHeld(ctx, db); err != nil {
				return err
			}
		}
	}
	return nil
}

// apply reads tg's topic below the sink's positions and writes what its
// records give into the fresh tables, BatchSize items per transaction.
func apply(ctx context.Context, cfg Config, db *sql.DB, tg *target) error {
	ends := tg.ends
	if len(ends) == 0 {
		return nil
	}
	from := map[int32]kgo.Offset{}
	for p := range ends {
		from[p] = kgo.NewOffset().At(0)
	}
	cl, err := cfg.Kafka.NewClient("rebuild",
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{tg.topic: from}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords())
	if err != nil {
		return err
	}
	defer cl.Close()
	flush := func() error {
		if tg.pending() == 0 {
			return nil
		}
		tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		if err != nil {
			return fmt.Errorf("rebuild: begin: %w", err)
		}
		defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
		if err := tg.flush(ctx, mysqlsink.NewTx(tx, time.Now().UnixMilli())); err != nil {
			return fmt.Errorf("rebuild: %w", err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("rebuild: commit: %w", err)
		}
		return nil
	}
	for len(ends) > 0 {
		pctx, cancel := context.WithTimeout(ctx, cfg.Idle)
		fs := cl.PollFetches(pctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
		if fs.Empty() && pctx.Err() != nil {
			return fmt.Errorf("rebuild: %s delivered nothing for %s with partitions below the sink's position %v", tg.topic, cfg.Idle, ends)
		}
		if err := kafkax.FetchErrors(fs, func(t string, p int32, err error) error { return fmt.Errorf("rebuild: fetch %s/%d: %w", t, p, err) }); err != nil {
			return err
		}
		for it := fs.RecordIter(); !it.Done(); {
			r := it.Next()
			end, ok := ends[r.Partition]
			if !ok || r.Offset >= end {
				continue
			}
			if r.Offset+1 >= end {
				delete(ends, r.Partition)
			}
			if r.Attrs.IsControl() {
				continue
			}
			tg.record(r)
			if tg.pending() >= cfg.BatchSize {
				if err := flush(); err != nil {
					return err
				}
			}
		}
	}
	return flush()
}
