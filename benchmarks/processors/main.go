// Command processors benchmarks the room processor (processors/room on the
// exactly-once runtime) against its raw limit, in the same run:
//
//	go run ./benchmarks/processors                   # 500k events, kfake in a child process
//	go run ./benchmarks/processors -events 200000    # quicker
//
// The input topic is pre-filled with -events room events as the relay
// writes them (keyed by room_id, the relay's six headers): RoomMicChanged
// sessions over 2,000 rooms and 20,000 users, plus -lucky of lucky
// RoomGiftSent. Then, alternately for -rounds rounds:
//
//   - raw: a GroupTransactSession copy loop doing no work — read_committed
//     consume, produce each record's key, value and headers unchanged, commit every
//     -commit-records records or -commit-interval — the limit of a
//     transactional consume-produce stage on this cluster;
//   - room: the room processor (decode, re-key by user_id, lucky inflow
//     with the MySQL rule cache, same commit settings).
//
// Each is timed from its first record to its last committed record and
// reported as events/s (wall) and events per CPU-second of this process
// (getrusage; kfake runs in a child process unless -inprocess, so broker
// work is not counted), with room/raw. The MySQL server (-mysql) gets a
// throwaway database for the rule rows.
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	_ "github.com/go-sql-driver/mysql" // the driver of sql.Open
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/benchmarks/internal/benchkafka"
	"github.com/hyapp/roomflow/domain/lucky/rulestore"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/mysqlx"
	"github.com/hyapp/roomflow/processors/room"
	"github.com/hyapp/roomflow/processors/room/roomtest"
	"github.com/hyapp/roomflow/processors/streams"
	"github.com/hyapp/roomflow/schemas/roomv1"
)

var (
	profileFile  *os.File
	withHeaders  = true
	slowPerEvent time.Duration
)

func main() {
	benchkafka.RunChild()
	var (
		events      = flag.Int("events", 500_000, "room events to process")
		luckyRatio  = flag.Float64("lucky", 0.1, "share of lucky RoomGiftSent among the events")
		partitions  = flag.Int("partitions", 6, "partitions of every topic")
		rounds      = flag.Int("rounds", 2, "raw/room rounds (alternating)")
		commitRecs  = flag.Int("commit-records", 5000, "process.commit_records")
		commitIvl   = flag.Duration("commit-interval", 100*time.Millisecond, "process.commit_interval")
		mysqlServer = flag.String("mysql", "root@tcp(127.0.0.1:3306)/", "MySQL server DSN (a database is created and dropped)")
		inprocess   = flag.Bool("inprocess", false, "run kfake in this process (its CPU then counts)")
		headers     = flag.Bool("input-headers", true, "give input records the relay's six headers (false: bare records, which the raw copy forwards cheaper)")
		cpuProfile  = flag.String("cpuprofile", "", "write a CPU profile of the room runs here")
	)
	flag.DurationVar(&slowPerEvent, "test-slow-per-event", 0, "test only: spin this long per record in the room runs (make bench-compare's own test slows one side with it)")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		profileFile = f
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	withHeaders = *headers
	if err := run(ctx, log, *events, *luckyRatio, int32(*partitions), *rounds, *commitRecs, *commitIvl, *mysqlServer, *inprocess); err != nil {
		fmt.Fprintln(os.Stderr, "benchmark:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger, events int, luckyRatio float64, partitions int32, rounds, commitRecs int,
	commitIvl time.Duration, mysqlServer string, inprocess bool) error {
	brokers, stopKfake, err := benchkafka.Start("", benchkafka.Options{Child: !inprocess})
	if err != nil {
		return err
	}
	defer stopKfake()

	db, dropDB, err := ruleDB(ctx, mysqlServer)
	if err != nil {
		return err
	}
	defer dropDB()

	cfg := config.Default()
	cfg.Kafka.Brokers = brokers
	cfg.Kafka.Partitions = partitions
	cfg.Kafka.ReplicationFactor = -1
	cfg.Process.CommitRecords = commitRecs
	cfg.Process.CommitInterval = config.Duration(commitIvl)
	cl, err := cfg.Kafka.Cluster(nil, nil).NewClient("bench", kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := kafkax.EnsureTopics(ctx, adm, cfg.Kafka.Layout()); err != nil {
		return err
	}
	rawOut := "bench.raw.out"
	if _, err := adm.CreateTopic(ctx, partitions, -1, nil, rawOut); err != nil {
		return err
	}

	fmt.Printf("pre-filling %d events (%.0f%% lucky gifts) into %d partitions...\n", events, luckyRatio*100, partitions)
	if err := prefill(ctx, cl, cfg.Kafka.Topics.RoomEvents, events, luckyRatio); err != nil {
		return err
	}
	fmt.Printf("GOMAXPROCS=%d NumCPU=%d kfake=%s commit_records=%d commit_interval=%s\n",
		runtime.GOMAXPROCS(0), runtime.NumCPU(), map[bool]string{true: "in-process", false: "child process"}[inprocess], commitRecs, commitIvl)

	var rawTotal, roomTotal result
	for i := range rounds {
		raw, err := rawCopy(ctx, brokers, cfg.Kafka.Topics.RoomEvents, rawOut, events, commitRecs, commitIvl, i)
		if err != nil {
			return fmt.Errorf("raw: %w", err)
		}
		if profileFile != nil && i == 0 {
			_ = pprof.StartCPUProfile(profileFile)
		}
		rules, err := rulestore.New(rulestore.Config{CacheSize: 1000}, db)
		if err != nil {
			return err
		}
		rm, err := roomRun(ctx, log, &cfg, rules, events, i)
		if profileFile != nil && i == 0 {
			pprof.StopCPUProfile()
		}
		if err != nil {
			return fmt.Errorf("room: %w", err)
		}
		fmt.Printf("round %d  raw  %s\n", i+1, raw)
		fmt.Printf("round %d  room %s  room/raw %.2f (wall), %.2f (per CPU-second)\n", i+1, rm, rm.rate()/raw.rate(), rm.perCPU()/raw.perCPU())
		rawTotal.add(raw)
		roomTotal.add(rm)
	}
	fmt.Printf("total    raw  %s\n", rawTotal)
	fmt.Printf("total    room %s\n", roomTotal)
	fmt.Printf("room/raw: %.2f of the raw limit (wall events/s); %.2f per CPU-second\n",
		roomTotal.rate()/rawTotal.rate(), roomTotal.perCPU()/rawTotal.perCPU())
	return nil
}

type result struct {
	events int
	wall   time.Duration
	cpu    time.Duration
}

func (r *result) add(o result) { r.events += o.events; r.wall += o.wall; r.cpu += o.cpu }
func (r result) rate() float64 { return float64(r.events) / r.wall.Seconds() }
func (r result) perCPU() float64 {
	return float64(r.events) / r.cpu.Seconds()
}
func (r result) String() string {
	return fmt.Sprintf("%8d events in %7.3fs: %9.0f events/s wall, %9.0f events per CPU-second (cpu %.2fs)",
		r.events, r.wall.Seconds(), r.rate(), r.perCPU(), r.cpu.Seconds())
}

func cpuNow() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// mark is the first-record timestamp (wall and CPU), set once.
type mark struct {
	set  atomic.Bool
	wall time.Time
	cpu  time.Duration
}

func (m *mark) hit() {
	if !m.set.Load() && m.set.CompareAndSwap(false, true) {
		m.wall, m.cpu = time.Now(), cpuNow()
	}
}

func (m *mark) since() result {
	return result{wall: time.Since(m.wall), cpu: cpuNow() - m.cpu}
}

// rawCopy is the raw limit: a transactional consume-produce copy loop
// doing no work, batching like the runtime.
func rawCopy(ctx context.Context, brokers []string, in, out string, events, commitRecs int, commitIvl time.Duration, round int) (result, error) {
	sess, err := kgo.NewGroupTransactSession(
		kgo.SeedBrokers(brokers...),
		kgo.ConsumerGroup(fmt.Sprintf("bench-raw-%d-%d", round, time.Now().UnixNano())),
		kgo.ConsumeTopics(in),
		kgo.TransactionalID(fmt.Sprintf("bench-raw-%d-%d", round, time.Now().UnixNano())),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	if err != nil {
		return result{}, err
	}
	defer sess.Close()
	var m mark
	done := 0
	var prodErr atomic.Value
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			prodErr.Store(err)
		}
	}
	for done < events {
		if err := sess.Begin(); err != nil {
			return result{}, err
		}
		n := 0
		deadline := time.Time{}
		for n < commitRecs {
			wait := commitIvl
			if !deadline.IsZero() {
				if wait = time.Until(deadline); wait <= 0 {
					break
				}
			}
			pctx, cancel := context.WithTimeout(ctx, wait)
			fs := sess.PollRecords(pctx, commitRecs-n)
			cancel()
			if ctx.Err() != nil {
				return result{}, ctx.Err()
			}
			fs.EachRecord(func(r *kgo.Record) {
				m.hit()
				if deadline.IsZero() {
					deadline = time.Now().Add(commitIvl)
				}
				n++
				sess.Produce(ctx, &kgo.Record{Topic: out, Key: r.Key, Value: r.Value, Headers: r.Headers}, promise)
			})
			if done+n >= events {
				break
			}
		}
		committed, err := sess.End(ctx, kgo.TryCommit)
		if err != nil {
			return result{}, err
		}
		if e := prodErr.Load(); e != nil {
			return result{}, e.(error)
		}
		if committed {
			done += n
		}
	}
	r := m.since()
	r.events = done
	return r, nil
}

// first marks the room processor's first record.
type first struct {
	p streams.Processor
	m *mark
}

func (f first) Process(t streams.Task, r *kgo.Record) error {
	f.m.hit()
	// Spinning, not sleeping: a slower processor costs CPU as well as time.
	for t0 := time.Now(); time.Since(t0) < slowPerEvent; {
	}
	return f.p.Process(t, r)
}

func roomRun(ctx context.Context, log *slog.Logger, cfg *config.Config, rules *rulestore.Loader, events, round int) (result, error) {
	group := fmt.Sprintf("bench-room-%d-%d", round, time.Now().UnixNano())
	reg := prometheus.NewRegistry()
	var m mark
	t := cfg.Kafka.Topics
	c := room.Config{
		Runtime: streams.Config{
			Name: room.Name, Input: t.RoomEvents, Group: group, TransactionalID: group, DLQ: t.DLQ,
			CommitInterval: cfg.Process.CommitInterval.D(), CommitRecords: cfg.Process.CommitRecords,
			ShutdownTimeout: cfg.Shutdown.Timeout.D(),
			Kafka:           cfg.Kafka.Cluster(nil, log), Registerer: reg, Logger: log, LagInterval: -1,
		},
		MicTopic: t.UserMicEvents, InflowTopic: t.LuckyPoolInflow, AppCode: cfg.AppCode,
	}
	if err := c.Validate(); err != nil {
		return result{}, err
	}
	runtime, err := streams.New(c.Runtime, first{p: room.NewProcessor(c, rules), m: &m})
	if err != nil {
		return result{}, err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- runtime.Run(rctx) }()
	var res result
	for {
		if n := counter(reg, "roomflow_process_records_in_total"); n >= float64(events) {
			res = m.since()
			res.events = int(n)
			break
		}
		select {
		case err := <-done:
			cancel()
			return result{}, fmt.Errorf("runtime stopped early: %v", err)
		case <-ctx.Done():
			cancel()
			return result{}, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		return result{}, err
	}
	if n := counter(reg, "roomflow_process_dlq_total"); n != 0 {
		return result{}, fmt.Errorf("%v records went to the DLQ", n)
	}
	return res, nil
}

func counter(reg *prometheus.Registry, name string) float64 {
	mfs, _ := reg.Gather()
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

func prefill(ctx context.Context, cl *kgo.Client, topic string, events int, luckyRatio float64) error {
	nLucky := int(float64(events) * luckyRatio)
	w := roomtest.Mic(events-nLucky, 2000, 20000, 1)
	recs := w.Records(topic)
	rng := rand.New(rand.NewPCG(2, 2))
	for i := range nLucky {
		roomID := "room-" + strconv.Itoa(1+rng.IntN(2000))
		id := fmt.Sprintf("evt-lucky-%d", i)
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(roomID), Value: roomtest.Gift(
			id, roomID, int64(i), &roomv1.RoomGiftSent{GiftId: "rose", Lucky: true,
				LuckyRuleVersion: "v1", HeatValue: rng.Int64N(100000), GiftCount: 1, SenderUserId: 1, TargetUserId: 2}),
			Headers: roomtest.RelayHeaders(id, "RoomGiftSent", int64(i), 1_767_225_600_000+int64(i))})
	}
	if !withHeaders {
		for _, r := range recs {
			r.Headers = nil
		}
	}
	// Lucky gifts spread through the stream (per-room order is irrelevant here).
	rng.Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
	var firstErr atomic.Value
	for _, r := range recs {
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				firstErr.Store(err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	if e := firstErr.Load(); e != nil {
		return e.(error)
	}
	return nil
}

// ruleDB creates a throwaway database with the schema and the rose/v1 rule.
func ruleDB(ctx context.Context, server string) (*sql.DB, func(), error) {
	scratch, err := mysqlx.NewScratch(ctx, server, fmt.Sprintf("bench_processors_%d", time.Now().UnixNano()), true)
	if err != nil {
		return nil, nil, err
	}
	drop := func() { _ = scratch.Drop(context.Background()) }
	db, err := sql.Open("mysql", scratch.DSN)
	if err == nil {
		r := roomtest.Rule("rose", "v1", 50000, 200000, 300000)
		_, err = db.ExecContext(ctx, `INSERT INTO lucky_gift_rules (gift_id, rule_version, pool_rate_ppm, platform_weight_ppm, room_weight_ppm, status)
VALUES (?, ?, ?, ?, ?, 'active')`, r.GiftID, r.RuleVersion, r.PoolRatePPM, r.PlatformWeightPPM, r.RoomWeightPPM)
		for _, tr := range r.Tiers {
			if err == nil {
				_, err = db.ExecContext(ctx, `INSERT INTO lucky_reward_tiers (gift_id, rule_version, tier_id, reward_type, reward_value, probability_ppm, enabled)
VALUES (?, ?, ?, ?, ?, ?, TRUE)`, r.GiftID, r.RuleVersion, tr.TierID, tr.RewardType, tr.RewardValue, tr.ProbabilityPPM)
			}
		}
	}
	if err != nil {
		if db != nil {
			db.Close()
		}
		drop()
		return nil, nil, err
	}
	return db, func() { db.Close(); drop() }, nil
}
