// Command mic benchmarks the mic processor (processors/mic/micproc) against
// its raw limit, and measures its state's memory and restore time.
//
//	go run ./benchmarks/mic                       # defaults below
//	go run ./benchmarks/mic -events 200000 -open 200000   # quicker
//
// Kafka is kfake (3 brokers) in a child process (this binary re-executed),
// so the measured process holds only the processor: its CPU time and heap
// are the processor's. -brokers or -kafka-config (TLS and SASL as roomflow's
// kafka block, see benchkafka.Flags) uses a real cluster instead.
//
// Throughput (-events): the input topic is pre-filled with a realistic mix
// of RoomMicChanged events (sessions of up, publish_confirmed, a few
// change, down; 1% duplicates; some across midnight). Then, in the same
// run on the same input:
//
//   - raw: the runtime running a processor that copies each record to an
//     output topic and does nothing else (same transactions, commit
//     interval and batch, read_committed) — the runtime's raw
//     transactional copy;
//
//   - mic: the mic processor (decode, state machine, state store +
//     changelog, ledger and derived events).
//
//   - rawx: the raw copy again, writing as many records per input as mic
//     wrote (ledger + derived events + changelog), to show how much of the
//     gap to raw is the output volume itself.
//
//   - rawo: the runtime writing mic's own output again, with no processing:
//     the records of the first mic round (every output topic and the
//     changelog: keys, values, headers, byte for byte) are read back once,
//     and each input record makes rawo emit its share of them, each to a
//     copy of its topic. rawx counts the records but not the bytes: its
//     copies of the input are smaller than mic's records (an input
//     envelope is about 125 bytes, a ledger entry with its session
//     snapshot over twice that) and byte-identical, so the compressor finds
//     each in its window and the broker gets a fraction of mic's volume. rawo is the same output at the same record count, so
//     mic/rawo is the cost of the processing alone. Its records live in an
//     anonymous mapping, off the Go heap, so they do not change the GC's
//     pacing. The changelog copy is partitioned by key (mic's changelog
//     follows its input partition), the one liberty it takes.
//
// With -rounds N the runs alternate N times (raw, mic, rawx, rawo, raw,
// ...; each mic round with its own consumer group and changelog topic, so
// it starts from empty state), because the machine's speed drifts.
//
// Each is reported as events/s of wall time and events per CPU-second of
// this process (the per-core figure), and mic/raw, mic/rawx, mic/rawo; the
// total line sums all rounds. mic's output is broken down by topic.
//
// -linger, -batch-max-bytes and -compression set kgo.ProducerLinger,
// kgo.ProducerBatchMaxBytes and kgo.ProducerBatchCompression for all three
// (unset: kgo's defaults, which the processors use).
//
// Memory and restore (-open): -open `up` events open as many sessions;
// the processor consumes them (all sessions open at once in its store)
// and stops; a new instance then restores the changelog. Reported: the
// restore time (until every partition is restored and processing could
// start) and the heap per open session after restore (HeapAlloc after GC,
// minus the heap before the instance started, divided by -open).
//
// Compensation catch-up (-overdue): -overdue `up` events open as many
// sessions that are never published; once the processor has consumed
// them, its clock jumps past mic.pending_publish_max_age and the next
// compensation tick, so all of them are overdue at once (an outage of the
// room events). Reported: the time from that tick until every timer close
// is committed (mic.compensation_batch_size per partition per
// transaction, back to back), the closes per second, the transactions.
//
// Totals (-totals, -totals-users): see totals.go.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/benchmarks/internal/benchkafka"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/processors/mic"
	"github.com/hyapp/roomflow/processors/mic/micproc"
	"github.com/hyapp/roomflow/processors/mic/mictest"
	"github.com/hyapp/roomflow/processors/streams"
	"github.com/hyapp/roomflow/schemas/envelope"
)

var (
	overdueSessions int // -overdue
	totalsUsers     int // -totals-users
	profilePath     string
	profileRun      string    // -profile-run
	producerOpts    []kgo.Opt // -linger, -batch-max-bytes
	rounds          = 1
)

func main() {
	benchkafka.RunChild()
	var (
		events     = flag.Int("events", 600_000, "events for the throughput runs (0 skips them)")
		open       = flag.Int("open", 1_000_000, "open sessions for the memory and restore run (0 skips it)")
		totUsers   = flag.Int("totals-users", 0, "users' totals for the totals state's memory and restore run (0 skips it)")
		overdue    = flag.Int("overdue", 0, "overdue sessions for the compensation catch-up run (0 skips it)")
		partitions = flag.Int("partitions", 6, "partitions per topic")
		commitRecs = flag.Int("commit-records", 5000, "process.commit_records")
		commitIvl  = flag.Duration("commit-interval", 100*time.Millisecond, "process.commit_interval")
		nRounds    = flag.Int("rounds", 1, "alternate raw, mic and rawx this many times")
		linger     = flag.Duration("linger", 0, "kgo.ProducerLinger for all runs (0: kgo default)")
		batchMax   = flag.Int("batch-max-bytes", 0, "kgo.ProducerBatchMaxBytes for all runs (0: kgo default)")
		codec      = flag.String("compression", "", "producer compression for all runs: none, snappy, lz4, zstd (empty: kgo default, snappy)")
		cpuProf    = flag.String("cpuprofile", "", "write a CPU profile of the first throughput run named by -profile-run")
		profRun    = flag.String("profile-run", "mic", "the throughput run -cpuprofile profiles: raw, mic or rawx")
		memProf    = flag.String("memprofile", "", "write an allocation profile at the end")
		kafkaFlags = benchkafka.RegisterFlags(nil, "kfake with 3 brokers in a child process")
	)
	flag.BoolVar(&totalsOn, "totals", true, "mic.totals_enabled, with the changelogs bootstrapped (markers) when true")
	flag.Parse()
	totalsUsers = *totUsers
	if *memProf != "" {
		runtime.MemProfileRate = 4096
		defer func() {
			if f, err := os.Create(*memProf); err == nil {
				_ = pprof.Lookup("allocs").WriteTo(f, 0)
				_ = f.Close()
			}
		}()
	}
	profilePath, profileRun = *cpuProf, *profRun
	if *linger > 0 {
		producerOpts = append(producerOpts, kgo.ProducerLinger(*linger))
	}
	if *batchMax > 0 {
		producerOpts = append(producerOpts, kgo.ProducerBatchMaxBytes(int32(*batchMax)))
	}
	switch *codec {
	case "":
	case "none":
		producerOpts = append(producerOpts, kgo.ProducerBatchCompression(kgo.NoCompression()))
	case "snappy":
		producerOpts = append(producerOpts, kgo.ProducerBatchCompression(kgo.SnappyCompression()))
	case "lz4":
		producerOpts = append(producerOpts, kgo.ProducerBatchCompression(kgo.Lz4Compression()))
	case "zstd":
		producerOpts = append(producerOpts, kgo.ProducerBatchCompression(kgo.ZstdCompression()))
	default:
		fmt.Fprintln(os.Stderr, "benchmark: unknown -compression", *codec)
		os.Exit(2)
	}
	rounds = max(*nRounds, 1)
	overdueSessions = *overdue
	if err := run(*events, *open, int32(*partitions), kafkaFlags, *commitRecs, *commitIvl); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "benchmark:", err)
		os.Exit(1)
	}
}

func run(events, open int, partitions int32, kafkaFlags *benchkafka.Flags, commitRecs int, commitIvl time.Duration) error {
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	kconn, stop, err := kafkaFlags.Connect(config.Default().Kafka, benchkafka.Options{Child: true})
	if err != nil {
		return err
	}
	defer stop()
	fmt.Printf("mic processor benchmark: GOMAXPROCS=%d, NumCPU=%d, partitions=%d, commit %d records / %s, brokers %s\n",
		runtime.GOMAXPROCS(0), runtime.NumCPU(), partitions, commitRecs, commitIvl, benchkafka.Describe(kconn))

	newCfg := func(prefix string) (*config.Config, error) {
		cfg := config.Default()
		cfg.Metrics.Addr = ""
		cfg.Kafka = kconn
		cfg.Kafka.Partitions = partitions
		cfg.Kafka.ReplicationFactor = -1
		cfg.Kafka.Topics = cfg.Kafka.Topics.WithPrefix(prefix)
		cfg.Process.CommitRecords = commitRecs
		cfg.Process.CommitInterval = config.Duration(commitIvl)
		cfg.Process.MicGroup = prefix + "mic"
		cl, err := cfg.Kafka.Cluster(nil, nil).NewClient("bench-admin")
		if err != nil {
			return nil, err
		}
		defer cl.Close()
		adm := kadm.NewClient(cl)
		if _, err := kafkax.EnsureTopics(ctx, adm, cfg.Kafka.Layout()); err != nil {
			return nil, err
		}
		if _, err := adm.CreateTopic(ctx, partitions, -1, nil, prefix+"raw-out"); err != nil {
			return nil, err
		}
		return &cfg, markTotals(ctx, &cfg, cfg.Kafka.Topics.MicStateChangelog)
	}

	if events > 0 {
		prefix := fmt.Sprintf("bench%d.", time.Now().UnixNano())
		cfg, err := newCfg(prefix)
		if err != nil {
			return err
		}
		n, err := fillMixed(ctx, cfg, events)
		if err != nil {
			return err
		}
		fmt.Printf("\nthroughput: %d input events pre-filled\n", n)
		out := strings.TrimSuffix(cfg.Kafka.Topics.DLQ, "hyapp.room.events.dlq.v1") + "raw-out"
		// copies runs the runtime with a processor that writes each input
		// record `ratio` times (on average) to one topic and does nothing else.
		copies := func(name string, ratio float64, round int) (result, error) {
			return measure(ctx, cfg, name, n, log, func(reg *prometheus.Registry) (*streams.Runtime, error) {
				acc := 0.0
				rc := runtimeConfig(cfg, reg, log)
				rc.Name, rc.Group = name, fmt.Sprintf("%s-%s-%d", cfg.Process.MicGroup, name, round)
				rc.Kafka.Extra = producerOpts
				return streams.New(rc, streams.ProcessorFunc(func(t streams.Task, r *kgo.Record) error {
					for acc += ratio; acc >= 1; acc-- {
						t.Emit(&kgo.Record{Topic: out, Key: r.Key, Value: r.Value, Headers: r.Headers})
					}
					return nil
				}))
			})
		}
		var tot [4]result
		var rp *replay // mic's first round's output, for rawo
		line := func(name string, r result) {
			fmt.Printf("  %-5s %9.0f events/s wall  %9.0f events per CPU-second  (%.1f CPU-s, %.1f s wall, %d records out)\n",
				name, r.wallRate(), r.cpuRate(), r.cpu.Seconds(), r.wall.Seconds(), r.out)
		}
		ratios := func(raw, micRes, rawAmp, rawOut result, amp float64) {
			fmt.Printf("  mic/raw:  %.2f (wall), %.2f (per CPU-second)\n", micRes.wallRate()/raw.wallRate(), micRes.cpuRate()/raw.cpuRate())
			fmt.Printf("  mic/rawx: %.2f (wall), %.2f (per CPU-second)   rawx = raw copy writing %.2f records per input, as many as mic writes (ledger, derived events, changelog)\n",
				micRes.wallRate()/rawAmp.wallRate(), micRes.cpuRate()/rawAmp.cpuRate(), amp)
			fmt.Printf("  mic/rawo: %.2f (wall), %.2f (per CPU-second)   rawo = raw run writing mic's own output records again (same bytes, topics)\n",
				micRes.wallRate()/rawOut.wallRate(), micRes.cpuRate()/rawOut.cpuRate())
		}
		var amp float64
		for round := 1; round <= rounds; round++ {
			raw, err := copies("raw", 1, round)
			if err != nil {
				return err
			}
			mcfg := *cfg
			if round > 1 { // empty state: a fresh group and changelog
				mcfg.Process.MicGroup = fmt.Sprintf("%s-r%d", cfg.Process.MicGroup, round)
				mcfg.Kafka.Topics.MicStateChangelog = fmt.Sprintf("%s-r%d", cfg.Kafka.Topics.MicStateChangelog, round)
				if err := createTopic(ctx, cfg, mcfg.Kafka.Topics.MicStateChangelog, true); err != nil {
					return err
				}
				if err := markTotals(ctx, &mcfg, mcfg.Kafka.Topics.MicStateChangelog); err != nil {
					return err
				}
			}
			micRes, err := measure(ctx, &mcfg, "mic", n, log, func(reg *prometheus.Registry) (*streams.Runtime, error) {
				mc := micConfig(&mcfg, reg, log)
				mc.Runtime.Kafka.Extra = producerOpts
				r, _, err := micproc.NewRuntime(mc)
				return r, err
			})
			if err != nil {
				return err
			}
			amp = float64(micRes.out) / float64(n)
			rawAmp, err := copies("rawx", amp, round)
			if err != nil {
				return err
			}
			if rp == nil {
				topics, counts := make([]string, 0, len(micRes.outByTopic)), make([]int, 0, len(micRes.outByTopic))
				for _, tc := range micRes.outByTopic {
					topics, counts = append(topics, tc.topic), append(counts, tc.n)
				}
				if rp, err = captureReplay(ctx, cfg, topics, counts, n); err != nil {
					return err
				}
				fmt.Printf("  rawo replays %s\n", rp)
			}
			rp.rewind()
			rawOut, err := measure(ctx, cfg, "rawo", n, log, func(reg *prometheus.Registry) (*streams.Runtime, error) {
				rc := runtimeConfig(cfg, reg, log)
				rc.Name, rc.Group = "rawo", fmt.Sprintf("%s-rawo-%d", cfg.Process.MicGroup, round)
				rc.Kafka.Extra = producerOpts
				return streams.New(rc, streams.ProcessorFunc(func(t streams.Task, _ *kgo.Record) error {
					rp.emit(t)
					return nil
				}))
			})
			if err != nil {
				return err
			}
			if rounds > 1 {
				fmt.Printf(" round %d\n", round)
			}
			line("raw", raw)
			line("mic", micRes)
			line("rawx", rawAmp)
			line("rawo", rawOut)
			ratios(raw, micRes, rawAmp, rawOut, amp)
			if round == 1 {
				fmt.Printf("  mic records out per input event by topic:")
				for _, tp := range micRes.outByTopic {
					fmt.Printf("  %s %.2f", strings.TrimPrefix(tp.topic, prefix), float64(tp.n)/float64(n))
				}
				fmt.Println()
			}
			for i, r := range []result{raw, micRes, rawAmp, rawOut} {
				tot[i].wall += r.wall
				tot[i].cpu += r.cpu
				tot[i].n += r.n
				tot[i].out += r.out
			}
		}
		if rounds > 1 {
			fmt.Printf(" total of %d rounds\n", rounds)
			line("raw", tot[0])
			line("mic", tot[1])
			line("rawx", tot[2])
			line("rawo", tot[3])
			ratios(tot[0], tot[1], tot[2], tot[3], amp)
		}
	}

	if open > 0 {
		cfg, err := newCfg(fmt.Sprintf("open%d.", time.Now().UnixNano()))
		if err != nil {
			return err
		}
		if err := fillOpen(ctx, cfg, open); err != nil {
			return err
		}
		fmt.Printf("\nmemory and restore: %d open sessions\n", open)
		first, err := measure(ctx, cfg, "mic", open, log, func(reg *prometheus.Registry) (*streams.Runtime, error) {
			r, _, err := micproc.NewRuntime(micConfig(cfg, reg, log))
			return r, err
		})
		if err != nil {
			return err
		}
		fmt.Printf("  opening: %9.0f events/s wall, %9.0f per CPU-second; state %d keys, %.0f bytes of keys+values per key\n",
			first.wallRate(), first.cpuRate(), int64(first.keys), first.stateBytes/first.keys)
		fmt.Printf("  heap per open session while processing (after the last commit): %.0f bytes\n", float64(first.heapDelta)/float64(open))
		if err := restoreRun(ctx, cfg, open, partitions, log, "open session", 10, 400); err != nil {
			return err
		}
	}

	if totalsUsers > 0 {
		cfg, err := newCfg(fmt.Sprintf("totals%d.", time.Now().UnixNano()))
		if err != nil {
			return err
		}
		if err := totalsRun(ctx, cfg, totalsUsers, partitions, log); err != nil {
			return err
		}
	}

	if overdueSessions > 0 {
		cfg, err := newCfg(fmt.Sprintf("overdue%d.", time.Now().UnixNano()))
		if err != nil {
			return err
		}
		if err := fillOpen(ctx, cfg, overdueSessions); err != nil {
			return err
		}
		return catchUpRun(ctx, cfg, overdueSessions, log)
	}
	return nil
}

// runtimeConfig is the runtime of the benchmark's processors on cfg: the
// mic input, group and DLQ, cfg's commit bounds, no lag polling.
func runtimeConfig(cfg *config.Config, reg prometheus.Registerer, log *slog.Logger) streams.Config {
	t := cfg.Kafka.Topics
	kafka := cfg.Kafka.Cluster(reg, log)
	return streams.Config{
		Input: t.UserMicEvents, Group: cfg.Process.MicGroup, DLQ: t.DLQ,
		CommitInterval: cfg.Process.CommitInterval.D(), CommitRecords: cfg.Process.CommitRecords,
		ShutdownTimeout: cfg.Shutdown.Timeout.D(),
		Kafka:           kafka, Registerer: reg, Logger: log,
		LagInterval: -1,
	}
}

// micConfig is the mic processor on cfg's topics with runtimeConfig and
// cfg's changelog; the mic settings are micproc's own defaults, which are
// the app's (wiring tests check it).
func micConfig(cfg *config.Config, reg prometheus.Registerer, log *slog.Logger) micproc.Config {
	t := cfg.Kafka.Topics
	c := micproc.Config{
		Runtime: runtimeConfig(cfg, reg, log),
		Topics: micproc.Topics{Ledger: t.MicLedger, SessionClosed: t.MicSessionClosed, DailyStats: t.MicDailyStats,
			LifetimeStats: t.MicLifetimeStats, DailyTotals: t.MicDailyTotals, LifetimeTotals: t.MicLifetimeTotals},
		Settings: micproc.Settings{DisableTotals: !totalsOn},
		AppCode:  cfg.AppCode,
	}
	c.Runtime.Changelog = t.MicStateChangelog
	return c
}

// catchUpRun opens n sessions, then moves the processor's clock past the
// pending max age and the compensation interval and measures how long the
// timer takes to close (and commit) all of them.
func catchUpRun(ctx context.Context, cfg *config.Config, n int, log *slog.Logger) error {
	var skew atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	reg := prometheus.NewRegistry()
	mc := micConfig(cfg, reg, log)
	mc.Runtime.Now = clock
	r, _, err := micproc.NewRuntime(mc)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	wait := func(cond func() bool) error {
		for !cond() {
			select {
			case err := <-done:
				return fmt.Errorf("mic stopped early: %v", err)
			case <-time.After(5 * time.Millisecond):
			}
		}
		return nil
	}
	if err := wait(func() bool { in, _, _, _ := gather(reg); return in >= float64(n) }); err != nil {
		return err
	}
	ledgerOut := func() float64 {
		for _, tc := range outByTopic(reg) {
			if tc.topic == cfg.Kafka.Topics.MicLedger {
				return float64(tc.n)
			}
		}
		return 0
	}
	commits0 := counter(reg, "roomflow_process_txn_commits_total")
	c0, t0 := cpuTime(), time.Now()
	skew.Store(int64(cfg.Mic.PendingPublishMaxAge.D() + cfg.Mic.CompensationInterval.D() + time.Minute))
	// Every session's ledger entry is committed twice: its up and its close.
	if err := wait(func() bool { return ledgerOut() >= float64(2*n) }); err != nil {
		return err
	}
	wall, cpu := time.Since(t0), cpuTime()-c0
	fmt.Printf("\ncompensation catch-up: %d overdue sessions over %d partitions, batch %d, interval %s\n",
		n, cfg.Kafka.Partitions, cfg.Mic.CompensationBatchSize, cfg.Mic.CompensationInterval)
	fmt.Printf("  all closed and committed %.2f s after the tick (%.0f closes/s wall, %.1f CPU-s), %.0f transactions, %.0f punctuation runs\n",
		wall.Seconds(), float64(n)/wall.Seconds(), cpu.Seconds(), counter(reg, "roomflow_process_txn_commits_total")-commits0,
		counter(reg, "roomflow_process_punctuations_total"))
	cancel()
	return <-done
}

// counter sums a counter's series.
func counter(reg *prometheus.Registry, name string) float64 {
	sum := 0.0
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// createTopic creates topic with the input's partitions (compacted: a
// changelog).
func createTopic(ctx context.Context, cfg *config.Config, topic string, compacted bool) error {
	cl, err := cfg.Kafka.Cluster(nil, nil).NewClient("bench-admin")
	if err != nil {
		return err
	}
	defer cl.Close()
	var conf map[string]*string
	if compacted {
		c := "compact"
		conf = map[string]*string{"cleanup.policy": &c}
	}
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, cfg.Kafka.Partitions, -1, conf, topic)
	if err == nil {
		err = resp.Err
	}
	return err
}

type topicCount struct {
	topic string
	n     int
}

type result struct {
	wall, cpu        time.Duration
	n, out           int
	outByTopic       []topicCount
	keys, stateBytes float64
	heapDelta        int64 // HeapAlloc after GC at the end minus before the run
}

func (r result) wallRate() float64 { return float64(r.n) / r.wall.Seconds() }
func (r result) cpuRate() float64  { return float64(r.n) / r.cpu.Seconds() }

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measure runs a runtime until it committed n input records, then stops it.
func measure(ctx context.Context, cfg *config.Config, name string, n int, log *slog.Logger,
	build func(*prometheus.Registry) (*streams.Runtime, error)) (result, error) {
	reg := prometheus.NewRegistry()
	r, err := build(reg)
	if err != nil {
		return result{}, err
	}
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	heap0 := ms.HeapAlloc
	if name == profileRun && profilePath != "" {
		if f, err := os.Create(profilePath); err == nil {
			_ = pprof.StartCPUProfile(f)
			defer pprof.StopCPUProfile()
			profilePath = ""
		}
	}
	c0, t0 := cpuTime(), time.Now()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	var res result
	for {
		in, out, keys, bytes := gather(reg)
		if in >= float64(n) {
			res = result{wall: time.Since(t0), cpu: cpuTime() - c0, n: n, out: int(out), keys: keys, stateBytes: bytes,
				outByTopic: outByTopic(reg)}
			runtime.GC()
			runtime.ReadMemStats(&ms)
			res.heapDelta = int64(ms.HeapAlloc) - int64(heap0)
			break
		}
		select {
		case err := <-done:
			cancel()
			return result{}, fmt.Errorf("%s stopped early: %v", name, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		return result{}, err
	}
	return res, nil
}

func gather(reg *prometheus.Registry) (in, out, keys, bytes float64) {
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			switch mf.GetName() {
			case "roomflow_process_records_in_total":
				in += v
			case "roomflow_process_records_out_total":
				out += v
			case "roomflow_process_state_keys":
				keys += v
			case "roomflow_process_state_bytes":
				bytes += v
			}
		}
	}
	return
}

// outByTopic is roomflow_process_records_out_total per topic.
func outByTopic(reg *prometheus.Registry) []topicCount {
	var out []topicCount
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "roomflow_process_records_out_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "topic" {
					out = append(out, topicCount{topic: l.GetValue(), n: int(m.GetCounter().GetValue())})
				}
			}
		}
	}
	return out
}

// restoreRun starts a fresh instance on the committed changelog of -open
// sessions and measures restore time and heap per open session.
func restoreRun(ctx context.Context, cfg *config.Config, open int, partitions int32, log *slog.Logger, unit string, limitS, limitBytes int) error {
	reg := prometheus.NewRegistry()
	r, _, err := micproc.NewRuntime(micConfig(cfg, reg, log))
	if err != nil {
		return err
	}
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapAlloc
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	t0 := time.Now()
	go func() { done <- r.Run(rctx) }()
	for len(r.Assigned()) < int(partitions) {
		select {
		case err := <-done:
			return fmt.Errorf("restore instance stopped: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	took := time.Since(t0)
	_, _, keys, bytes := gather(reg)
	runtime.GC()
	runtime.ReadMemStats(&ms)
	after := ms.HeapAlloc
	per := float64(int64(after)-int64(before)) / float64(open)
	fmt.Printf("  restore: %d keys (%.0f MB of keys+values) in %.2f s (start to all %d partitions restored; limit %d s)\n",
		int64(keys), bytes/1e6, took.Seconds(), partitions, limitS)
	fmt.Printf("  heap per %s after restore: %.0f bytes (heap %.0f MB -> %.0f MB; limit %d bytes)\n",
		unit, per, float64(before)/1e6, float64(after)/1e6, limitBytes)
	cancel()
	return <-done
}

// fillMixed pre-fills the input with realistic sessions; it returns the
// number of records.
func fillMixed(ctx context.Context, cfg *config.Config, events int) (int, error) {
	r := rand.New(rand.NewPCG(1, 2))
	start := time.Now().Add(-48 * time.Hour).UnixMilli()
	st := mictest.Generate(r, mictest.Gen{AppCode: "hyapp", Users: 50_000, Sessions: events * 10 / 37, StartMs: start,
		SpreadMs: 36 * 3600 * 1000, MaxLen: 3 * time.Hour, DupRate: 0.01, OpenRate: 0.02})
	for i := range st.Events {
		st.Events[i].EventID = uuidLike(r)
	}
	return len(st.Events), produce(ctx, cfg, st.Events)
}

// fillOpen pre-fills -open `up` events of distinct sessions with realistic
// id sizes (UUID event ids, 29-byte session ids).
func fillOpen(ctx context.Context, cfg *config.Config, open int) error {
	r := rand.New(rand.NewPCG(3, 4))
	now := time.Now().UnixMilli()
	evs := make([]mic.Event, 0, 100_000)
	for i := 0; i < open; i++ {
		evs = append(evs, mic.Event{EventID: uuidLike(r), EventType: mic.EventTypeRoomMicChanged, AppCode: "hyapp",
			RoomID: fmt.Sprintf("room_%07d", r.IntN(200_000)), RoomVersion: int64(1 + r.IntN(1_000_000)),
			OccurredAtMs: now - int64(r.IntN(60_000)), UserID: int64(10_000_000 + i), SeatNo: int32(1 + r.IntN(8)),
			Action: mic.ActionUp, MicSessionID: fmt.Sprintf("ms_%026d", r.Int64()), PublishState: "pending_publish"})
		if len(evs) == cap(evs) {
			if err := produce(ctx, cfg, evs); err != nil {
				return err
			}
			evs = evs[:0]
		}
	}
	return produce(ctx, cfg, evs)
}

func uuidLike(r *rand.Rand) string {
	return fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", r.Uint32(), r.Uint32()&0xffff, r.Uint32()&0xffff, r.Uint32()&0xffff, r.Uint64()&0xffffffffffff)
}

func produce(ctx context.Context, cfg *config.Config, evs []mic.Event) error {
	recs := make([]*kgo.Record, len(evs))
	for i := range evs {
		ev := &evs[i]
		recs[i] = &kgo.Record{Topic: cfg.Kafka.Topics.UserMicEvents, Key: []byte(strconv.FormatInt(ev.UserID, 10)), Value: ev.Encode(),
			Headers: envelope.AppendHeaders(nil, []byte(ev.EventID), []byte(mic.EventTypeRoomMicChanged), []byte(ev.AppCode))}
	}
	return produceTo(ctx, cfg, recs)
}
