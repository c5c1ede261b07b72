// Command sink benchmarks the MySQL fact sink against its raw limit and a
// naive consumer, in one run on the same MariaDB and the same ledger.
//
//	go run ./benchmarks/sink                     # 200k entries, 3 rounds, in-process kfake, private mariadbd
//	go run ./benchmarks/sink -entries 50000      # quicker
//	go run ./benchmarks/sink -private=false      # on the server of -mysql instead
//
// The ledger is sinktest.LedgerGen's: each session is an "up", for half of
// them a "publish_confirmed", and a "down" that closes it with one daily
// delta (two when it crosses 00:00 UTC) and a lifetime delta, so 60% of
// the entries are session updates and 40% are closes. Every mode starts on
// a fresh, migrated database:
//
//   - sink: the real `roomflow sink` (mysqlsink.Sink) consuming the
//     pre-produced ledger from Kafka (kfake in-process unless -brokers or -kafka-config),
//     timed from start until roomflow_sink_offsets reaches the end of every
//     partition: dedupe, pre-aggregation, facts and offsets in one
//     transaction per batch;
//   - store: the sink's transaction alone (Store.Apply with the mic ledger
//     applier on batches read from memory), to separate the Kafka cost
//     from the MySQL cost;
//   - raw (a): the same fact rows (sessions, daily, lifetime, pre-aggregated
//     per batch) written with plain batched multi-row upserts, one
//     transaction per batch, without consumption rows, version checks or
//     offsets: the limit of the database for these rows;
//   - naive (b): one transaction per ledger entry, as a straightforward
//     consumer would do it: check the event id, insert it, upsert the
//     session, daily and lifetime rows one statement each, update the
//     offset, commit. It runs on the first -naive entries only.
//
// Reported as entries/s and the ratios sink/raw, store/raw, sink/naive.
package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/benchmarks/internal/benchkafka"
	"github.com/hyapp/roomflow/benchmarks/internal/rawledger"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/mysqlx"
	"github.com/hyapp/roomflow/internal/tempmariadb"
	"github.com/hyapp/roomflow/schemas/userv1"
	mysqlsink "github.com/hyapp/roomflow/sinks/mysql"
	"github.com/hyapp/roomflow/sinks/mysql/luckyinflow"
	"github.com/hyapp/roomflow/sinks/mysql/micledger"
	"github.com/hyapp/roomflow/sinks/mysql/sinktest"
)

type opts struct {
	entries, naive, batch, users int
	rounds, parallelism          int
	partitions                   int32
	serverDSN                    string
	kafka                        *benchkafka.Flags
	private                      bool
	bufferPool                   string
	flush                        time.Duration
	keepDB                       bool
}

func main() {
	var o opts
	flag.IntVar(&o.entries, "entries", 200_000, "ledger entries for the sink, store and raw runs")
	flag.IntVar(&o.naive, "naive", 5_000, "ledger entries for the naive run (one transaction each)")
	flag.IntVar(&o.batch, "batch", 2000, "sink.batch_size (and the raw/store batch)")
	flag.IntVar(&o.users, "users", 5_000, "distinct users (few enough that most sessions close within the run)")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds of raw, store and sink (medians are reported)")
	flag.IntVar(&o.parallelism, "parallelism", 2, "sink transactions per batch (split by partition)")
	partitions := flag.Int("partitions", 6, "partitions of the ledger topic")
	flag.StringVar(&o.serverDSN, "mysql", "root@tcp(127.0.0.1:3306)/", "MySQL server DSN when -private=false (databases are created and dropped)")
	flag.BoolVar(&o.private, "private", true, "start a throwaway mariadbd for the run (buffer pool -buffer-pool) instead of using -mysql")
	flag.StringVar(&o.bufferPool, "buffer-pool", "1G", "innodb_buffer_pool_size of the private mariadbd")
	o.kafka = benchkafka.RegisterFlags(nil, "in-process kfake, 3 brokers")
	flag.DurationVar(&o.flush, "flush", 50*time.Millisecond, "sink.flush_interval")
	flag.BoolVar(&o.keepDB, "keep-db", false, "do not drop the databases")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchmark:", err)
			os.Exit(1)
		}
		_ = pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	o.partitions = int32(*partitions)
	if err := run(o); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "benchmark:", err)
		os.Exit(1)
	}
}

// database is one round's scratch database and its pool.
type database struct {
	*mysqlx.Scratch
	db *sql.DB
}

func newDatabase(ctx context.Context, o opts, suffix string) (*database, error) {
	var b [3]byte
	_, _ = rand.Read(b[:])
	scratch, err := mysqlx.NewScratch(ctx, o.serverDSN, "sinkbench_"+hex.EncodeToString(b[:])+"_"+suffix, true)
	if err != nil {
		return nil, err
	}
	cfg := config.Default().MySQL
	cfg.DSN = scratch.DSN
	db, err := mysqlx.Open(ctx, cfg)
	if err != nil {
		_ = scratch.Drop(ctx)
		return nil, err
	}
	return &database{Scratch: scratch, db: db}, nil
}

// release closes the pool and drops the database unless -keep-db.
func (d *database) release(ctx context.Context, keep bool) {
	d.db.Close()
	if keep {
		_ = d.Keep()
		return
	}
	_ = d.Drop(ctx)
}

type result struct {
	name    string
	entries int
	elapsed time.Duration
}

func (r result) rate() float64 { return float64(r.entries) / r.elapsed.Seconds() }

func run(o opts) error {
	ctx := context.Background()
	if o.private {
		// The shared development server keeps MariaDB's default 128 MiB
		// buffer pool, which the 200k-entry working set exceeds, so its
		// numbers measure page eviction rather than the sink.
		srv, err := tempmariadb.Start(ctx, tempmariadb.Options{BufferPool: o.bufferPool,
			Args: []string{"--innodb-log-file-size=1G"}})
		if err != nil {
			return fmt.Errorf("private mariadbd: %w", err)
		}
		defer srv.Stop()
		dsn := srv.DSN
		o.serverDSN = dsn
		fmt.Printf("private mariadbd (innodb_buffer_pool_size=%s, binlog off, flush_log_at_trx_commit=1) at %s\n", o.bufferPool, dsn)
	}
	gen := sinktest.NewLedgerGen(42, "hyapp", o.users)
	ledger := gen.Next(o.entries)
	var closes, dailies int
	for _, e := range ledger {
		if e.Action == "down" {
			closes++
			dailies += len(e.Daily)
		}
	}
	fmt.Printf("ledger: %d entries, %d users: %.1f%% session updates, %.1f%% closes (%.2f daily deltas per close)\n",
		len(ledger), o.users, 100*float64(len(ledger)-closes)/float64(len(ledger)), 100*float64(closes)/float64(len(ledger)), float64(dailies)/float64(closes))

	var dbs []*database
	defer func() {
		for _, d := range dbs {
			d.release(ctx, o.keepDB)
		}
	}()
	// Kafka: the ledger is produced once; each sink round reads it with a
	// new consumer group into a new database.
	kcfg, stopKafka, err := o.kafka.Connect(config.Default().Kafka, benchkafka.Options{})
	if err != nil {
		return err
	}
	defer stopKafka()
	kcfg.Partitions = o.partitions
	kcfg.Topics = kcfg.Topics.WithPrefix(fmt.Sprintf("sinkbench%d.", time.Now().UnixNano()))
	cl, err := kcfg.Cluster(nil, nil).NewClient("bench", kgo.ProducerBatchMaxBytes(1<<20))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := kafkax.EnsureTopics(ctx, adm, kcfg.Layout()); err != nil {
		return err
	}
	if err := sinktest.Produce(ctx, cl, sinktest.LedgerRecords(kcfg.Topics.MicLedger, ledger)); err != nil {
		return err
	}
	ends, err := adm.ListEndOffsets(ctx, kcfg.Topics.MicLedger)
	if err != nil {
		return err
	}
	want := map[int32]int64{}
	ends.Each(func(l kadm.ListedOffset) { want[l.Partition] = l.Offset })

	fresh := func(s string) (*database, error) {
		d, err := newDatabase(ctx, o, s)
		if err == nil {
			dbs = append(dbs, d)
		}
		return d, err
	}
	modes := []struct {
		name string
		run  func(d *database) (result, error)
	}{
		{"raw", func(d *database) (result, error) { return runRaw(ctx, d.db, ledger, o.batch) }},
		{"store", func(d *database) (result, error) { return runStore(ctx, d.db, ledger, o) }},
		{"sink", func(d *database) (result, error) { return runSink(ctx, d, kcfg, want, len(ledger), o) }},
	}
	rates := map[string][]float64{}
	var sinkVsRaw []float64
	for round := 1; round <= o.rounds; round++ {
		byMode := map[string]float64{}
		for _, m := range modes {
			d, err := fresh(m.name)
			if err != nil {
				return err
			}
			r, err := m.run(d)
			if err != nil {
				return fmt.Errorf("%s: %w", m.name, err)
			}
			byMode[m.name] = r.rate()
			rates[m.name] = append(rates[m.name], r.rate())
			fmt.Printf("  round %d %-6s %9.0f entries/s (%d in %s)\n", round, m.name, r.rate(), r.entries, r.elapsed.Round(time.Millisecond))
			d.release(ctx, o.keepDB)
			dbs = dbs[:len(dbs)-1]
		}
		sinkVsRaw = append(sinkVsRaw, byMode["sink"]/byMode["raw"])
	}
	d, err := fresh("naive")
	if err != nil {
		return err
	}
	nr, err := runNaive(ctx, d.db, ledger[:min(o.naive, len(ledger))])
	if err != nil {
		return fmt.Errorf("naive: %w", err)
	}
	fmt.Printf("  naive        %9.0f entries/s (%d in %s)\n", nr.rate(), nr.entries, nr.elapsed.Round(time.Millisecond))
	naive := nr.rate()

	raw, store, sink := median(rates["raw"]), median(rates["store"]), median(rates["sink"])
	fmt.Printf("\nmedians of %d rounds (batch %d, sink parallelism %d, %d partitions):\n\n", o.rounds, o.batch, o.parallelism, o.partitions)
	fmt.Printf("| mode | entries/s | vs raw (a) | vs naive (b) |\n|---|---:|---:|---:|\n")
	for _, m := range []struct {
		n string
		r float64
	}{{"sink (Kafka -> MySQL, exactly once)", sink}, {"store (sink transaction only, 1 connection)", store}, {"raw (a): batched upserts, no dedupe/offsets", raw}, {"naive (b): one transaction per entry", naive}} {
		fmt.Printf("| %s | %.0f | %.0f%% | %.1fx |\n", m.n, m.r, 100*m.r/raw, m.r/naive)
	}
	fmt.Printf("\npaired sink/raw per round: %v (median %.0f%%)\n", pct(sinkVsRaw), 100*median(sinkVsRaw))
	fmt.Printf("targets: sink >= 30000/s: %v (%.0f); sink >= 50%% of raw: %v (%.0f%%); sink >= 20x naive: %v (%.1fx)\n",
		sink >= 30000, sink, median(sinkVsRaw) >= 0.5, 100*median(sinkVsRaw), sink >= 20*naive, sink/naive)
	return nil
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func pct(v []float64) string {
	out := make([]string, len(v))
	for i, x := range v {
		out[i] = fmt.Sprintf("%.0f%%", 100*x)
	}
	return "[" + strings.Join(out, " ") + "]"
}

// partitionOf spreads users over partitions like the Kafka key hash would.
func partitionOf(user int64, n int32) int32 { return int32(user % int64(n)) }

func runStore(ctx context.Context, db *sql.DB, ledger []*userv1.MicLedgerEntry, o opts) (result, error) {
	ledgerApplier, err := micledger.New(micledger.Config{Topic: "ledger", DefaultAppCode: "hyapp"})
	if err != nil {
		return result{}, err
	}
	st, err := mysqlsink.NewStore(mysqlsink.StoreConfig{Group: "bench", Appliers: []mysqlsink.Registration{mysqlsink.Register(ledgerApplier)}}, db)
	if err != nil {
		return result{}, err
	}
	var tps []mysqlsink.TP
	for p := range o.partitions {
		tps = append(tps, mysqlsink.TP{Topic: "ledger", Partition: p})
	}
	claimed, err := st.Claim(ctx, "bench", tps, time.Now().UnixMilli())
	if err != nil {
		return result{}, err
	}
	claims := map[mysqlsink.TP]int64{}
	for tp, c := range claimed {
		claims[tp] = c.Generation
	}
	next := map[mysqlsink.TP]int64{}
	recs := make([]mysqlsink.Record, len(ledger))
	for i, e := range ledger {
		tp := mysqlsink.TP{Topic: "ledger", Partition: partitionOf(e.UserId, o.partitions)}
		recs[i] = mysqlsink.Record{TP: tp, Offset: next[tp], Item: e}
		next[tp]++
	}
	t0 := time.Now()
	for lo := 0; lo < len(recs); lo += o.batch {
		if _, err := st.Apply(ctx, "bench", claims, recs[lo:min(len(recs), lo+o.batch)], time.Now().UnixMilli()); err != nil {
			return result{}, err
		}
	}
	return result{"store", len(recs), time.Since(t0)}, nil
}

func runSink(ctx context.Context, d *database, kcfg config.KafkaConfig, want map[int32]int64, n int, o opts) (result, error) {
	group := d.Name
	ledgerApplier, err := micledger.New(micledger.Config{Topic: kcfg.Topics.MicLedger, DefaultAppCode: "hyapp"})
	if err != nil {
		return result{}, err
	}
	inflowApplier, err := luckyinflow.New(luckyinflow.Config{Topic: kcfg.Topics.LuckyPoolInflow, DefaultAppCode: "hyapp"})
	if err != nil {
		return result{}, err
	}
	store, err := mysqlsink.NewStore(mysqlsink.StoreConfig{
		Group:    group,
		Appliers: []mysqlsink.Registration{mysqlsink.Register(ledgerApplier), mysqlsink.Register(inflowApplier)},
	}, d.db)
	if err != nil {
		return result{}, err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := mysqlsink.New(mysqlsink.Config{
		BatchSize:     o.batch,
		FlushInterval: o.flush,
		Group:         group,
		DLQTopic:      kcfg.Topics.DLQ,
		Kafka:         kcfg.Cluster(nil, log),
		Logger:        log,
		Parallelism:   o.parallelism,
	}, store)
	if err != nil {
		return result{}, err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	t0 := time.Now()
	go func() { done <- s.Run(rctx) }()
	defer func() { cancel(); <-done }()
	for {
		rows, err := d.db.QueryContext(ctx, "SELECT partition_id, next_offset FROM roomflow_sink_offsets WHERE consumer_group = ? AND topic = ?", group, kcfg.Topics.MicLedger)
		if err != nil {
			return result{}, err
		}
		caught := 0
		for rows.Next() {
			var p int32
			var next int64
			if err := rows.Scan(&p, &next); err != nil {
				rows.Close()
				return result{}, err
			}
			if next >= want[p] {
				caught++
			}
		}
		rows.Close()
		if caught == len(want) {
			return result{"sink", n, time.Since(t0)}, nil
		}
		select {
		case err := <-done:
			done <- err
			return result{}, fmt.Errorf("sink stopped: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// --- (a) raw: plain batched multi-row upserts of the same fact rows ---

func runRaw(ctx context.Context, db *sql.DB, ledger []*userv1.MicLedgerEntry, batch int) (result, error) {
	t0 := time.Now()
	if err := rawledger.Write(ctx, db, ledger, batch, false); err != nil {
		return result{}, err
	}
	return result{"raw", len(ledger), time.Since(t0)}, nil
}

// --- (b) naive: one transaction per entry ---

func runNaive(ctx context.Context, db *sql.DB, ledger []*userv1.MicLedgerEntry) (result, error) {
	if _, err := db.ExecContext(ctx, "INSERT INTO roomflow_sink_offsets (consumer_group, topic, partition_id, next_offset, owner_id, generation) VALUES ('naive', 'ledger', 0, 0, 'naive', 1)"); err != nil {
		return result{}, err
	}
	sessionSQL := fmt.Sprintf(rawledger.SessionSQL, rawledger.Placeholders(1, 21))
	dailySQL := fmt.Sprintf(rawledger.DailySQL, rawledger.Placeholders(1, 10))
	lifeSQL := fmt.Sprintf(rawledger.LifetimeSQL, rawledger.Placeholders(1, 8))
	t0 := time.Now()
	for i, e := range ledger {
		err := func() error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			var seen int
			if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM user_mic_event_consumption WHERE app_code = ? AND event_id = ?", e.AppCode, e.EventId).Scan(&seen); err != nil {
				return err
			}
			if seen > 0 {
				return tx.Commit()
			}
			now := time.Now().UnixMilli()
			if _, err := tx.ExecContext(ctx, fmt.Sprintf(rawledger.ConsumptionSQL, rawledger.Placeholders(1, 11)),
				e.AppCode, e.EventId, e.EventType, e.MicSessionId, e.UserId, e.Action, e.Status, e.SkipReason, e.OccurredAtMs, now, now); err != nil {
				return err
			}
			if s := e.Session; s != nil {
				if _, err := tx.ExecContext(ctx, sessionSQL, e.AppCode, s.MicSessionId, s.UserId, s.RoomId, s.FirstSeatNo, s.CurrentSeatNo, s.Status,
					s.SeatStartedAtMs, rawledger.Nullable(s.PublishingStartedAtMs), rawledger.Nullable(s.EndedAtMs), s.EndReason, s.SeatOccupiedMs,
					s.MicOnlineMs, s.OpenedEventId, s.PublishEventId, s.ClosedEventId, s.LastEventId, s.LastRoomVersion, s.CreatedAtMs, s.UpdatedAtMs, s.Version); err != nil {
					return err
				}
			}
			for _, d := range e.Daily {
				if _, err := tx.ExecContext(ctx, dailySQL, e.AppCode, e.UserId, d.StatDate, d.SeatOccupiedDeltaMs, d.MicOnlineDeltaMs, d.SessionCountDelta, d.RoomCountDelta, d.FirstMicAtMs, d.LastMicAtMs, e.OccurredAtMs); err != nil {
					return err
				}
			}
			if l := e.Lifetime; l != nil {
				if _, err := tx.ExecContext(ctx, lifeSQL, e.AppCode, e.UserId, l.SeatOccupiedDeltaMs, l.MicOnlineDeltaMs, l.SessionCountDelta, l.FirstMicAtMs, l.LastMicAtMs, e.OccurredAtMs); err != nil {
					return err
				}
			}
			if _, err := tx.ExecContext(ctx, "UPDATE roomflow_sink_offsets SET next_offset = ? WHERE consumer_group = 'naive' AND topic = 'ledger' AND partition_id = 0", strconv.Itoa(i+1)); err != nil {
				return err
			}
			return tx.Commit()
		}()
		if err != nil {
			return result{}, err
		}
	}
	return result{"naive", len(ledger), time.Since(t0)}, nil
}
