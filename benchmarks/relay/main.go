// Command relay benchmarks `roomflow relay` against its raw limit.
//
//	go run ./benchmarks/relay                # 1M rows, 300-byte payloads, in-process kfake
//	go run ./benchmarks/relay -rows 200000   # quicker
//
// Throughput: room_outbox is pre-filled with -rows rows, then
//   - raw: a plain `SELECT ... WHERE id > ? ORDER BY id LIMIT n` scan
//     producing the same records (same Router) without transactions
//     (idempotent producer, asynchronous, one Flush at the end), into its
//     own topic;
//   - relay: the real relay (leader group, fencing, position, one Kafka
//     transaction per batch) from an empty position,
//
// all in the same run on the same database and cluster (raw, relay, raw
// again; the ratio is against the better raw run), reported as events/s and
// relay/raw.
//
// Latency: the relay then keeps running while rows are inserted at -rate
// events/s (in transactions of -txn-rows rows); the time from each
// insert's commit to its record being visible to a read_committed consumer
// is reported as p50/p99.
//
// With -mode binlog the rows are written after a binlog-mode relay stored
// its position, each followed by the two IM status UPDATEs room_outbox
// rows get (which the binlog carries and the relay must parse past), and
// the comparison is:
//   - raw binlog: a go-mysql binlog reader from the same position parsing
//     every row event, counting the INSERTs (no Kafka);
//   - relay binlog: the real relay in binlog mode streaming that binlog;
//   - relay poll: the poll-mode relay over the same rows, for reference;
//
// and the latency run uses the binlog-mode relay. Binlog mode runs on a
// throwaway mariadbd with the row binlog on (internal/tempmariadb); -mysql
// is not used then.
//
// The benchmark creates and drops its own database (mysql server from
// -mysql) and uses an in-process kfake of 3 brokers unless -brokers or
// -kafka-config is set.
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/benchmarks/internal/benchkafka"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/mysqlx"
	"github.com/hyapp/roomflow/producers/relay"
)

func main() {
	var (
		rows      = flag.Int("rows", 1_000_000, "rows to pre-fill for the throughput run")
		payload   = flag.Int("payload", 300, "payload bytes per row")
		batch     = flag.Int("batch", 1000, "relay.batch_size (and the raw scan's LIMIT)")
		mysqlDSN  = flag.String("mysql", "root@tcp(127.0.0.1:3306)/", "MySQL server DSN (a database is created and dropped)")
		rate      = flag.Int("rate", 5000, "events/s for the latency run (0 skips it)")
		txnRows   = flag.Int("txn-rows", 10, "rows per insert transaction in the latency run")
		nWriters  = flag.Int("writers", 16, "concurrent writers in the latency run")
		latDur    = flag.Duration("latency-duration", 20*time.Second, "length of the latency run")
		pollIvl   = flag.Duration("poll", 100*time.Millisecond, "relay.poll_interval")
		keepDB    = flag.Bool("keep-db", false, "do not drop the database")
		partition = flag.Int("partitions", 12, "partitions per topic")
		mode      = flag.String("mode", "poll", "relay.mode to benchmark: poll or binlog")
		kafka     = benchkafka.RegisterFlags(nil, "in-process kfake, 3 brokers")
	)
	flag.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the poll-mode relay's throughput run here (the in-process kfake's CPU counts too)")
	flag.Parse()
	if *mode == "binlog" {
		if err := runBinlog(*rows, *payload, *batch, kafka, *rate, *txnRows, *nWriters, *latDur, *pollIvl, int32(*partition)); err != nil {
			fmt.Fprintln(os.Stderr, "benchmark:", err)
			os.Exit(1)
		}
		return
	} else if *mode != "poll" {
		fmt.Fprintln(os.Stderr, "benchmark: -mode must be poll or binlog")
		os.Exit(2)
	}
	if err := run(*rows, *payload, *batch, *mysqlDSN, kafka, *rate, *txnRows, *nWriters, *latDur, *pollIvl, *keepDB, int32(*partition)); err != nil {
		fmt.Fprintln(os.Stderr, "benchmark:", err)
		os.Exit(1)
	}
}

// bench is what both modes' runs share: the Kafka topics, a scratch
// database and the config of a relay on them.
type bench struct {
	kcfg   config.KafkaConfig
	adm    *kadm.Client
	prefix string
	db     *sql.DB
	cfg    config.Config
}

// setup connects Kafka (topics under a fresh prefix, plus the raw topic)
// and creates a migrated scratch database on serverDSN; close undoes it.
func setup(ctx context.Context, serverDSN string, kafka *benchkafka.Flags, batch int, poll time.Duration, keepDB bool, partitions int32, log *slog.Logger) (_ *bench, closeAll func(), err error) {
	var closers []func()
	closeAll = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	defer func() {
		if err != nil {
			closeAll()
		}
	}()
	kcfg, stopKafka, err := kafka.Connect(config.Default().Kafka, benchkafka.Options{})
	if err != nil {
		return nil, nil, err
	}
	closers = append(closers, stopKafka)
	kcfg.Partitions = partitions
	prefix := fmt.Sprintf("bench%d.", time.Now().UnixNano())
	kcfg.Topics = kcfg.Topics.WithPrefix(prefix)
	admCl, err := kcfg.Cluster(nil, nil).NewClient("bench-admin")
	if err != nil {
		return nil, nil, err
	}
	closers = append(closers, admCl.Close)
	adm := kadm.NewClient(admCl)
	if _, err := kafkax.EnsureTopics(ctx, adm, kcfg.Layout()); err != nil {
		return nil, nil, err
	}
	if _, err := adm.CreateTopic(ctx, partitions, -1, nil, prefix+"raw"); err != nil {
		return nil, nil, err
	}
	scratch, err := mysqlx.NewScratch(ctx, serverDSN, fmt.Sprintf("relay_bench_%d", time.Now().UnixNano()), true)
	if err != nil {
		return nil, nil, err
	}
	if keepDB {
		closers = append(closers, func() { _ = scratch.Keep() })
	} else {
		closers = append(closers, func() { _ = scratch.Drop(context.Background()) })
	}
	dsn := scratch.DSN
	db, err := mysqlx.Open(ctx, config.MySQLConfig{DSN: dsn, MaxOpenConns: 16, MaxIdleConns: 16})
	if err != nil {
		return nil, nil, err
	}
	closers = append(closers, func() { db.Close() })

	cfg := config.Default()
	cfg.Kafka = kcfg
	cfg.MySQL.DSN = dsn
	cfg.Metrics.Addr = ""
	cfg.Relay.BatchSize = batch
	cfg.Relay.PollInterval = config.Duration(poll)
	cfg.Relay.FailoverTimeout = config.Duration(3 * time.Second)
	cfg.Relay.TransactionalID = prefix + "relay"
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	if err := relayConfig(cfg, log).Validate(); err != nil {
		return nil, nil, err
	}
	return &bench{kcfg: kcfg, adm: adm, prefix: prefix, db: db, cfg: cfg}, closeAll, nil
}

func run(rows, payload, batch int, serverDSN string, kafka *benchkafka.Flags, rate, txnRows, writers int, latDur, poll time.Duration, keepDB bool, partitions int32) error {
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	b, closeAll, err := setup(ctx, serverDSN, kafka, batch, poll, keepDB, partitions, log)
	if err != nil {
		return err
	}
	defer closeAll()
	kcfg, db, cfg, rawTopic := b.kcfg, b.db, b.cfg, b.prefix+"raw"

	fmt.Printf("filling room_outbox with %d rows of %d-byte payloads...\n", rows, payload)
	t0 := time.Now()
	if err := fill(ctx, db, rows, payload, false); err != nil {
		return err
	}
	var maxID uint64
	if err := db.QueryRowContext(ctx, "SELECT COALESCE(MAX(id),0) FROM room_outbox").Scan(&maxID); err != nil {
		return err
	}
	fmt.Printf("filled in %s (%.0f rows/s)\n", time.Since(t0).Round(time.Millisecond), float64(rows)/time.Since(t0).Seconds())

	// raw, relay, raw again: the raw limit is the better of the two, so
	// cache warm-up cannot flatter the relay.
	router := relay.Router{Default: rawTopic, DLQ: kcfg.Topics.DLQ, MaxRecordBytes: cfg.Relay.MaxRecordBytes}
	rawRate := 0.0
	rawOnce := func(label string) error {
		dur, n, err := rawScan(ctx, db, kcfg, router, batch, cfg.Relay.MaxBatchBytes)
		if err != nil {
			return err
		}
		rate := float64(n) / dur.Seconds()
		rawRate = max(rawRate, rate)
		fmt.Printf("%-6s: %d events in %s = %.0f events/s (scan + non-transactional produce)\n", label, n, dur.Round(time.Millisecond), rate)
		return nil
	}
	if err := rawOnce("raw"); err != nil {
		return err
	}
	stopProfile, err := startProfile(cpuProfile)
	if err != nil {
		return err
	}
	relDur, lead, err := relayRun(ctx, cfg, db, log, maxID)
	stopProfile()
	if err != nil {
		return err
	}
	relRate := float64(rows) / relDur.Seconds()
	fmt.Printf("relay : %d events in %s = %.0f events/s (transactional, position per batch; leader after %s, not counted)\n",
		rows, relDur.Round(time.Millisecond), relRate, lead.Round(time.Millisecond))
	if err := rawOnce("raw"); err != nil {
		return err
	}
	fmt.Printf("ratio : relay/raw = %.1f%% of the better raw run (target >= 70%%, and >= 50000 events/s)\n", 100*relRate/rawRate)

	if rate > 0 {
		return latency(ctx, cfg, db, log, rate, txnRows, writers, payload, latDur)
	}
	return nil
}

// cpuProfile is -cpuprofile: where startProfile writes the relay run's profile.
var cpuProfile string

// startProfile starts a CPU profile into path (nothing when empty) and
// returns its stop.
func startProfile(path string) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

func payloadOf(i, n int) []byte {
	p := make([]byte, n)
	for j := range p {
		p[j] = byte(i + j*31)
	}
	return p
}

// fill inserts rows with 4 concurrent writers in multi-row INSERTs; with
// status, each INSERT is followed by the IM publisher's two status UPDATEs
// of its rows (sending, then sent), so the binlog holds two UPDATE row
// images per inserted row.
func fill(ctx context.Context, db *sql.DB, rows, payload int, status bool) error {
	const perStmt = 500
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	now := time.Now().UnixMilli()
	for range 4 {
		wg.Go(func() {
			for {
				start := int(next.Add(perStmt)) - perStmt
				if start >= rows {
					return
				}
				n := min(perStmt, rows-start)
				q, args := insertQuery(start, n, payload, now)
				res, err := db.ExecContext(ctx, q, args...)
				if err == nil && status {
					err = setStatus(ctx, db, res, n)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// setStatus runs the two status UPDATEs of the n rows res inserted (a
// multi-row INSERT takes consecutive ids: innodb_autoinc_lock_mode 1,
// MariaDB's default).
func setStatus(ctx context.Context, db *sql.DB, res sql.Result, n int) error {
	first, err := res.LastInsertId()
	if err != nil {
		return err
	}
	for _, st := range []string{"sending", "sent"} {
		if _, err := db.ExecContext(ctx, "UPDATE room_outbox SET status = ? WHERE id BETWEEN ? AND ?", st, first, first+int64(n)-1); err != nil {
			return err
		}
	}
	return nil
}

const insertHead = "INSERT INTO room_outbox (app_code, event_id, event_type, room_id, room_version, payload, occurred_at_ms, created_at_ms, updated_at_ms) VALUES "

// insertQuery is the multi-row INSERT of rows start..start+n-1.
func insertQuery(start, n, payload int, occurred int64) (string, []any) {
	var b strings.Builder
	b.WriteString(insertHead)
	args := make([]any, 0, n*9)
	for i := start; i < start+n; i++ {
		if i > start {
			b.WriteByte(',')
		}
		b.WriteString("(?,?,?,?,?,?,?,?,?)")
		args = append(args, "hyapp", fmt.Sprintf("bench-%d", i), "RoomGiftSent", fmt.Sprintf("room-%d", i%5000),
			int64(i/5000+1), payloadOf(i, payload), occurred, occurred, occurred)
	}
	return b.String(), args
}

// rawScan is the raw limit: the relay's read query, the same record
// building, a plain idempotent producer, no transactions, no position.
func rawScan(ctx context.Context, db *sql.DB, kcfg config.KafkaConfig, router relay.Router, batch, maxBytes int) (time.Duration, int, error) {
	cl, err := kcfg.Cluster(nil, nil).NewClient("bench-raw", kgo.ProducerLinger(0), kgo.MaxBufferedRecords(2*batch+16))
	if err != nil {
		return 0, 0, err
	}
	defer cl.Close()
	src := relay.NewSource(db, "room_outbox")
	var after uint64
	n := 0
	var perr atomic.Value
	start := time.Now()
	for {
		rows, err := src.After(ctx, after, batch, maxBytes/2/batch)
		if err != nil {
			return 0, 0, err
		}
		rows = rows[:(&relay.Budget{Max: maxBytes, Used: relay.PayloadBytes(rows)}).Fit(rows)]
		if _, err := src.LoadPayloads(ctx, rows, nil); err != nil {
			return 0, 0, err
		}
		if len(rows) == 0 {
			break
		}
		for i := range rows {
			rec, _ := router.Record(&rows[i], "")
			cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
				if err != nil {
					perr.Store(err)
				}
			})
		}
		n += len(rows)
		after = rows[len(rows)-1].ID
	}
	// Records are produced asynchronously (bounded by the client's buffer)
	// and flushed once: the fastest a scan can feed Kafka.
	if err := cl.Flush(ctx); err != nil {
		return 0, 0, err
	}
	if e := perr.Load(); e != nil {
		return 0, 0, e.(error)
	}
	return time.Since(start), n, nil
}

// relayConfig is the benchmark's relay on cfg, logging to log (its Kafka
// clients' warnings too), without metrics; the relay's own defaults are
// the app's (wiring tests check it), so only what the benchmark sets is
// given.
func relayConfig(cfg config.Config, log *slog.Logger) relay.Config {
	t := cfg.Kafka.Topics
	return relay.Config{
		BatchSize: cfg.Relay.BatchSize, PollInterval: cfg.Relay.PollInterval.D(),
		FailoverTimeout: cfg.Relay.FailoverTimeout.D(), TransactionalID: cfg.Relay.TransactionalID,
		Topic: t.RoomEvents, DLQTopic: t.DLQ, OffsetsTopic: t.RelayOffsets,
		Kafka: cfg.Kafka.Cluster(nil, log), Logger: log,
		Mode: relay.Mode(cfg.Relay.Mode),
		Binlog: relay.BinlogConfig{DSN: cfg.MySQL.DSN, ServerID: cfg.Relay.Binlog.ServerID,
			HeartbeatPeriod: cfg.Relay.Binlog.HeartbeatPeriod.D()},
	}
}

// relayRun runs the relay until it has committed maxID and returns the
// time from leadership to that commit.
func relayRun(ctx context.Context, cfg config.Config, db *sql.DB, log *slog.Logger, maxID uint64) (time.Duration, time.Duration, error) {
	var leadAt time.Time
	done := make(chan struct{})
	var once sync.Once
	start := time.Now()
	rc := relayConfig(cfg, log)
	rc.Hooks = relay.Hooks{
		OnLeader: func(l bool) {
			if l && leadAt.IsZero() {
				leadAt = time.Now()
			}
		},
		AfterCommit: func(b relay.BatchInfo, err error) {
			if err == nil && b.High >= maxID {
				once.Do(func() { close(done) })
			}
		},
	}
	r, err := relay.New(rc, db)
	if err != nil {
		return 0, 0, err
	}
	rctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- r.Run(rctx) }()
	select {
	case <-done:
	case err := <-errc:
		cancel()
		return 0, 0, fmt.Errorf("relay stopped: %v", err)
	}
	end := time.Now()
	cancel()
	<-errc
	return end.Sub(leadAt), leadAt.Sub(start), nil
}

// latency inserts at rate events/s with writers concurrent writers (each
// paced to its share, transactions of txnRows rows, like room-service's
// concurrent requests) while a relay runs, and measures insert commit (the
// moment the INSERT's autocommit returns) to the record being received by
// a read_committed consumer.
func latency(ctx context.Context, cfg config.Config, db *sql.DB, log *slog.Logger, rate, txnRows, writers, payload int, d time.Duration) error {
	cl, err := cfg.Kafka.Cluster(nil, nil).NewClient("bench-latency", kgo.ConsumeTopics(cfg.Kafka.Topics.RoomEvents),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()),
		kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	// Resolve the consumer's start (the end) before inserting.
	poll(ctx, cl, 300*time.Millisecond)

	// The throughput run left everything relayed; a new relay resumes.
	r, err := relay.New(relayConfig(cfg, log), db)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- r.Run(rctx) }()
	time.Sleep(2 * time.Second) // leadership, position

	var (
		mu        sync.Mutex
		received  = map[string]time.Time{}
		committed = map[string]time.Time{}
	)
	consumed := make(chan struct{})
	var stopConsume atomic.Bool
	go func() {
		defer close(consumed)
		for !stopConsume.Load() {
			fs := poll(ctx, cl, 200*time.Millisecond)
			now := time.Now()
			mu.Lock()
			fs.EachRecord(func(rec *kgo.Record) {
				for _, h := range rec.Headers {
					if h.Key == "event_id" {
						received[string(h.Value)] = now
					}
				}
			})
			mu.Unlock()
		}
	}()

	interval := time.Duration(float64(time.Second) * float64(txnRows*writers) / float64(rate))
	fmt.Printf("latency: %d writers inserting %d events/s in transactions of %d rows (each writer one every %s) for %s, poll_interval %s...\n",
		writers, rate, txnRows, interval, d, cfg.Relay.PollInterval)
	begin := time.Now()
	end := begin.Add(d)
	var late atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			i := 10_000_000 + w*1_000_000
			for k := 0; ; k++ {
				next := begin.Add(time.Duration(k)*interval + time.Duration(w)*interval/time.Duration(writers))
				if !next.Before(end) {
					return
				}
				if wait := time.Until(next); wait > 0 {
					time.Sleep(wait)
				} else if wait < -interval {
					late.Add(1)
				}
				var b strings.Builder
				b.WriteString(insertHead)
				args := make([]any, 0, txnRows*9)
				ids := make([]string, txnRows)
				now := time.Now().UnixMilli()
				for j := range txnRows {
					if j > 0 {
						b.WriteByte(',')
					}
					b.WriteString("(?,?,?,?,?,?,?,?,?)")
					ids[j] = fmt.Sprintf("lat-%d", i)
					args = append(args, "hyapp", ids[j], "RoomGiftSent", fmt.Sprintf("lroom-%d-%d", w, i%500), int64(i), payloadOf(i, payload), now, now, now)
					i++
				}
				if _, err := db.ExecContext(ctx, b.String(), args...); err != nil {
					errs <- err
					return
				}
				at := time.Now()
				mu.Lock()
				for _, id := range ids {
					committed[id] = at
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	sent := time.Since(begin)
	// Let the tail arrive.
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		n := 0
		for id := range committed {
			if _, ok := received[id]; ok {
				n++
			}
		}
		all := n == len(committed)
		mu.Unlock()
		if all {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	stopConsume.Store(true)
	<-consumed
	cancel()
	<-errc
	mu.Lock()
	defer mu.Unlock()
	var lats []time.Duration
	for id, at := range committed {
		if got, ok := received[id]; ok {
			// The consumer can beat the writer's bookkeeping by a hair;
			// that is a latency of about zero.
			lats = append(lats, max(0, got.Sub(at)))
		}
	}
	if len(lats) == 0 {
		return fmt.Errorf("latency: no record seen")
	}
	sort.Slice(lats, func(a, b int) bool { return lats[a] < lats[b] })
	q := func(p float64) time.Duration { return lats[int(p*float64(len(lats)-1))] }
	fmt.Printf("latency: %d/%d events seen, achieved %.0f events/s (writer transactions late by more than one interval: %d): p50 %s  p99 %s  max %s\n",
		len(lats), len(committed), float64(len(committed))/sent.Seconds(), late.Load(),
		q(0.50).Round(100*time.Microsecond), q(0.99).Round(100*time.Microsecond), lats[len(lats)-1].Round(100*time.Microsecond))
	return nil
}

func poll(ctx context.Context, cl *kgo.Client, d time.Duration) kgo.Fetches {
	c, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return cl.PollFetches(c)
}
