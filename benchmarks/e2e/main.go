// Command e2e measures the whole fact path with every component as its own
// `roomflow` process (built once): relay, process, sink and publish-im
// (outbox_worker.enabled: false: IM delivery is paced at Tencent's limit
// by design and measured by benchmarks/im), on the local MariaDB and a
// kfake cluster in a child process (benchkafka). The traffic is loadgen's
// default scenario (mic sessions, plain and lucky gifts, joins, heat
// changes), scaled up, inserted into room_outbox by this process as a room
// service would (multi-row transactions at a fixed rate); lucky gifts go
// in without a draw and `roomflow lucky` is not started.
//
//	go run ./benchmarks/e2e                                 # latency at 1k/5k/10k events/s, default and tuned, then the sustained-rate search
//	go run ./benchmarks/e2e -quick                          # short runs
//	go run ./benchmarks/e2e -repeat 3 -duration 10s         # the spread of 3 runs per config and rate
//	go run ./benchmarks/e2e -rates 5000 -configs tuned -sustain ""
//	go run ./benchmarks/e2e -scaleout                        # scale-out and failover of replicas, see scaleOut
//	go run ./benchmarks/e2e -mariadb tuned -layouts processes,run # a throwaway MariaDB tuned for throughput; also `roomflow run`
//
// MySQL (-mariadb): "local" is the server of -mysql as it is configured
// (the development server: 128 MiB buffer pool, a log flush per commit);
// "tuned" starts a throwaway mariadbd (internal/tempmariadb) set for
// throughput: 1 GiB buffer pool, innodb_flush_log_at_trx_commit=2,
// sync_binlog=0, no binary log, 1 GiB redo log.
//
// Layouts (-layouts): "processes" runs each component as its own process;
// "run" runs them all in one `roomflow run` process (latency at -run-rates).
// -sink-batch, -sink-flush and -sink-parallelism set the sink of every run.
//
// Raw limit (-limit-events): before the sustained-rate search, the same
// server takes the fact path's rows of that many events of the mix as
// fast as plain multi-row statements go: the room_outbox inserts (on
// -writers connections) while the mic ledger's rows of its mic events
// (consumption, session, daily and lifetime rows, benchmarks/internal/
// rawledger) go in on -sink-parallelism connections, on a scratch database.
// Sustained rates are reported as a share of it.
//
// Latency (-rates, -duration; per -configs): from each row's insert commit
// to (a) its record committed on hyapp.room.events.v1 (read_committed
// tail), (b) for a mic event, its user_mic_event_consumption row (the row's
// updated_at_ms, the sink's batch time, so up to one MySQL commit early),
// (c) for a down, the UserMicSessionClosed it caused (read_committed
// tail): p50/p99/p999, with the CPU of every process over the run and its
// share of the machine's cores. "writer" is this process: the room
// service's inserts plus the measuring tails.
//
// Sustained rate (-sustain, -sustain-duration): the rates are tried in
// order until one is not sustained (for the layouts after the first, from
// the first one's highest sustained rate on, down from there while not
// sustained); each runs until the lag criteria can be judged: a rate is
// sustained when at its end every
// stage's lag (relay: rows inserted but not yet on the room events topic;
// room and mic processors and the sink: their consumer group lag) is at
// most 2 s of traffic and was not growing over the last 30 s.
//
// The machine is shared with whatever else runs: repeat runs and report
// the spread. -out writes a Markdown report and SVG charts.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/benchmarks/internal/benchkafka"
	"github.com/hyapp/roomflow/benchmarks/internal/rawledger"
	"github.com/hyapp/roomflow/benchmarks/internal/rfproc"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/mysqlx"
	"github.com/hyapp/roomflow/internal/tempmariadb"
	"github.com/hyapp/roomflow/producers/loadgen"
	"github.com/hyapp/roomflow/producers/loadgen/live"
	"github.com/hyapp/roomflow/producers/loadgen/report"
	"github.com/hyapp/roomflow/schemas/userv1"
	"github.com/hyapp/roomflow/sinks/mysql/sinktest"
)

// components are the processes of the fact path, in pipeline order
// (publish-im runs without its outbox worker: it takes its share of the
// machine reading the room events, as in production).
var components = []string{"relay", "process", "sink", "publish-im"}

// layoutProcs are the roomflow processes of each layout.
var layoutProcs = map[string][]string{"processes": components, "run": {"run"}}

// cpuKeys are the CPU consumers a run of layout reports: its roomflow
// processes, this process (the room service's inserts and the measuring),
// the kfake child, and the MariaDB server (the local one is shared with
// anything else using it).
func cpuKeys(layout string) []string {
	return append(slices.Clone(layoutProcs[layout]), "writer", "kfake", "mariadb")
}

// others are the processes measured besides the children: kfake (a child
// of this binary) and the MariaDB server: with -mariadb tuned the
// throwaway mariadbd this process started, else every one on the host.
func others(ownMariaDB bool) map[string][]int {
	self, _ := os.ReadFile("/proc/self/comm")
	db := append(rfproc.Processes("mariadbd", 0), rfproc.Processes("mysqld", 0)...)
	if ownMariaDB {
		db = rfproc.Processes("mariadbd", os.Getpid())
	}
	return map[string][]int{
		"writer":  {os.Getpid()},
		"kfake":   rfproc.Processes(strings.TrimSpace(string(self)), os.Getpid()),
		"mariadb": db,
	}
}

// cpuSnap is the CPU time of each of pids that runs.
func cpuSnap(pids []int) map[int]time.Duration {
	m := map[int]time.Duration{}
	for _, p := range pids {
		if c, err := rfproc.ProcCPU(p); err == nil {
			m[p] = c
		}
	}
	return m
}

// cpuSince is the CPU the processes of before used since: those that ran
// at both ends (a short-lived process of the same name is left out).
func cpuSince(before map[int]time.Duration) time.Duration {
	var t time.Duration
	for p, c0 := range before {
		if c, err := rfproc.ProcCPU(p); err == nil && c >= c0 {
			t += c - c0
		}
	}
	return t
}

type options struct {
	bin, server, out string
	mariadb          string
	layouts          []string
	limitEvents      int
	sinkBatch        int
	sinkFlush        time.Duration
	sinkPar          int
	rates, runRates  []float64
	duration         time.Duration
	configs          []string
	sustain          []float64
	sustainDur       time.Duration
	partitions       int
	writers          int
	repeat           int
	keepLogs         bool
	metricsPort      int
	tunedPoll        time.Duration
	tunedCommit      time.Duration
	tunedFlush       time.Duration
	scaleOut         bool
	scaleRate        float64
	scaleDur         time.Duration
}

func main() {
	benchkafka.RunChild()
	var o options
	var rates, runRates, sustain, configs, layouts string
	quick := flag.Bool("quick", false, "short runs (10s per rate, sustained search 40s at two rates)")
	flag.StringVar(&o.bin, "bin", "", "roomflow binary (empty: go build ./cmd/roomflow into a temporary directory)")
	flag.StringVar(&o.server, "mysql", cmp.Or(os.Getenv("ROOMFLOW_TEST_MYSQL_DSN"), "root@tcp(127.0.0.1:3306)/"), "MySQL server DSN (a throwaway database is created)")
	flag.StringVar(&o.mariadb, "mariadb", "local", "MySQL server: local (the server of -mysql as configured) or tuned (a throwaway mariadbd set for throughput, see the package doc)")
	flag.StringVar(&layouts, "layouts", "processes", "comma-separated: processes (one roomflow process per component), run (all in one `roomflow run`)")
	flag.IntVar(&o.limitEvents, "limit-events", 200_000, "events of the raw MySQL limit measured before the sustained-rate search (0: skip)")
	flag.IntVar(&o.sinkBatch, "sink-batch", 0, "sink.batch_size of every run (0: the default)")
	flag.DurationVar(&o.sinkFlush, "sink-flush", 0, "sink.flush_interval of the default config (0: the default)")
	flag.IntVar(&o.sinkPar, "sink-parallelism", 2, "the sink's --parallelism (transactions per batch), and the raw limit's ledger connections")
	flag.StringVar(&rates, "rates", "1000,5000,10000", "fixed rates (events/s) of the latency runs")
	flag.StringVar(&runRates, "run-rates", "", "fixed rates of the latency runs of the run layout (empty: -rates)")
	flag.DurationVar(&o.duration, "duration", 30*time.Second, "length of each latency run")
	flag.StringVar(&configs, "configs", "default,tuned", "configs of the latency runs: default, tuned (relay.poll_interval, process.commit_interval, sink.flush_interval lowered)")
	flag.StringVar(&sustain, "sustain", "10000,15000,20000,25000", "rates (events/s) tried for the highest sustained rate, at the default config (empty: skip)")
	flag.DurationVar(&o.sustainDur, "sustain-duration", 60*time.Second, "length of each sustained-rate run (at least 40s: the last 30s judge the growth)")
	flag.IntVar(&o.partitions, "partitions", 6, "partitions per topic")
	flag.IntVar(&o.repeat, "repeat", 1, "latency runs per config and rate; with more than one the report gives the spread (min/median/max) and charts the median")
	flag.IntVar(&o.writers, "writers", 8, "concurrent room_outbox insert transactions (MySQL connections)")
	flag.StringVar(&o.out, "out", "", "directory for report.md and the SVG charts (empty: none)")
	flag.BoolVar(&o.scaleOut, "scaleout", false, "run the scale-out scenario alone (relay leader + standby, 3 replicas of process, sink and publish-im, one added and one stopped), on a database of its own")
	flag.Float64Var(&o.scaleRate, "scaleout-rate", 2000, "events/s of the scale-out run")
	flag.DurationVar(&o.scaleDur, "scaleout-duration", 90*time.Second, "length of the scale-out run (a replica joins at 1/3, one stops at 2/3)")
	flag.BoolVar(&o.keepLogs, "keep-logs", false, "keep the children's logs (their directory is printed)")
	flag.DurationVar(&o.tunedPoll, "tuned-poll", 10*time.Millisecond, "relay.poll_interval of the tuned config")
	flag.DurationVar(&o.tunedCommit, "tuned-commit", 20*time.Millisecond, "process.commit_interval of the tuned config")
	flag.DurationVar(&o.tunedFlush, "tuned-flush", 10*time.Millisecond, "sink.flush_interval of the tuned config")
	flag.IntVar(&o.metricsPort, "metrics-port", 0, "serve each child's /metrics on 127.0.0.1 from this port on, in component order (0: none), to watch a run with curl")
	flag.Parse()
	var err error
	if o.rates, err = floats(rates); err == nil {
		o.sustain, err = floats(sustain)
	}
	if err == nil {
		o.runRates, err = floats(cmp.Or(runRates, rates))
	}
	if err == nil && o.writers < 1 {
		err = fmt.Errorf("-writers %d: want at least 1", o.writers)
	}
	if err == nil && o.repeat < 1 {
		err = fmt.Errorf("-repeat %d: want at least 1", o.repeat)
	}
	if err == nil && o.mariadb != "local" && o.mariadb != "tuned" {
		err = fmt.Errorf("-mariadb %q: want local or tuned", o.mariadb)
	}
	if err == nil && o.sinkPar < 1 {
		err = fmt.Errorf("-sink-parallelism %d: want at least 1", o.sinkPar)
	}
	for l := range strings.SplitSeq(layouts, ",") {
		if layoutProcs[l] == nil && err == nil {
			err = fmt.Errorf("-layouts: unknown layout %q (processes, run)", l)
		}
		o.layouts = append(o.layouts, l)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(2)
	}
	if *quick {
		o.duration, o.sustainDur = 10*time.Second, 40*time.Second
		o.limitEvents = min(o.limitEvents, 50_000)
		if len(o.sustain) > 2 {
			o.sustain = o.sustain[:2]
		}
	}
	o.configs = strings.Split(configs, ",")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
}

func floats(s string) ([]float64, error) {
	var out []float64
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("rate %q: want a positive number of events/s", f)
		}
		out = append(out, v)
	}
	return out, nil
}

// tuned lowers the three intervals a record waits in on its way to MySQL
// (-tuned-poll, -tuned-commit, -tuned-flush). The trade-off: more, smaller
// transactions (relay polls, processor and sink commits), so more CPU and
// MySQL/Kafka round trips per event.
func (o *options) tuned(c *config.Config) {
	c.Relay.PollInterval = config.Duration(o.tunedPoll)
	c.Process.CommitInterval = config.Duration(o.tunedCommit)
	c.Sink.FlushInterval = config.Duration(o.tunedFlush)
}

type bench struct {
	o   options
	env *rfproc.Env
	seq int // runs so far: event id prefixes
}

// tunedMariaDB are the mariadbd options of -mariadb tuned (the buffer pool
// aside): durability traded for throughput, as a benchmark box may.
var tunedMariaDB = []string{"--innodb-flush-log-at-trx-commit=2", "--sync-binlog=0", "--innodb-log-file-size=1G"}

func run(ctx context.Context, o options) error {
	if o.mariadb == "tuned" {
		srv, err := tempmariadb.Start(ctx, tempmariadb.Options{BufferPool: "1G", Args: tunedMariaDB})
		if err != nil {
			return fmt.Errorf("-mariadb tuned: %w", err)
		}
		defer srv.Stop()
		o.server = srv.DSN
	}
	env, err := rfproc.NewEnv(ctx, rfproc.EnvOptions{Name: "e2e", Bin: o.bin, MySQLServer: o.server, KeepLogs: o.keepLogs, KafkaChild: true,
		Configure: func(c *config.Config) {
			c.Kafka.Partitions = int32(o.partitions)
			c.OutboxWorker.Enabled = false // IM delivery is benchmarks/im's
			c.Shutdown.Timeout = config.Duration(5 * time.Second)
			c.Sink.BatchSize = cmp.Or(o.sinkBatch, c.Sink.BatchSize)
			c.Sink.FlushInterval = cmp.Or(config.Duration(o.sinkFlush), c.Sink.FlushInterval)
		}})
	if err != nil {
		return err
	}
	defer env.Close()
	b := &bench{o: o, env: env}
	if err := loadgen.SeedRule(ctx, env.DB, loadgen.DefaultScenario().Rule); err != nil {
		return err
	}
	host, _ := os.Hostname()
	fmt.Printf("roomflow end to end: %s, GOMAXPROCS %d, NumCPU %d (shared machine), kfake 3 brokers in a child process, %d partitions, layouts %s (components: %s), MySQL %s, sink batch %d, flush %s, parallelism %d; tuned config: relay.poll_interval %s, process.commit_interval %s, sink.flush_interval %s\n",
		host, runtime.GOMAXPROCS(0), runtime.NumCPU(), o.partitions, strings.Join(o.layouts, ", "), strings.Join(components, ", "), mariadbLabel(o.mariadb),
		env.Config.Sink.BatchSize, env.Config.Sink.FlushInterval.D(), o.sinkPar, o.tunedPoll, o.tunedCommit, o.tunedFlush)

	if o.scaleOut {
		return b.scaleOut(ctx, o.scaleRate, o.scaleDur)
	}
	rep := &results{mariadb: mariadbLabel(o.mariadb), sink: fmt.Sprintf("batch %d, flush %s, parallelism %d", env.Config.Sink.BatchSize, env.Config.Sink.FlushInterval.D(), o.sinkPar)}
	for _, layout := range o.layouts {
		for _, name := range o.configs {
			c := b.env.Config
			switch name {
			case "default":
			case "tuned":
				o.tuned(&c)
			default:
				return fmt.Errorf("-configs: unknown config %q (default, tuned)", name)
			}
			rates := o.rates
			if layout == "run" {
				rates = o.runRates
			}
			for _, rate := range rates {
				for range o.repeat {
					r, err := b.measure(ctx, name, layout, c, rate, o.duration, false)
					if err != nil {
						return fmt.Errorf("%s %s at %.0f events/s: %w", layout, name, rate, err)
					}
					rep.latency = append(rep.latency, r)
					r.print()
				}
			}
		}
	}
	if len(o.sustain) > 0 && o.limitEvents > 0 {
		l, err := b.rawLimit(ctx, o.limitEvents)
		if err != nil {
			return fmt.Errorf("raw limit: %w", err)
		}
		rep.limit = &l
		l.print()
	}
	floor := 0.0 // the first layout's highest sustained rate: where the next ones start
	for _, layout := range o.layouts {
		srch := newSearch(o.sustain, floor)
		for rate, ok := srch.next(); ok; rate, ok = srch.next() {
			r, err := b.measure(ctx, "default", layout, b.env.Config, rate, o.sustainDur, true)
			if err != nil {
				return fmt.Errorf("%s sustained %.0f events/s: %w", layout, rate, err)
			}
			rep.sustain = append(rep.sustain, r)
			r.printSustain(rep.limit)
			srch.record(r.sustained)
		}
		if floor == 0 {
			floor = srch.best
		}
	}
	if o.out != "" {
		return rep.write(o.out)
	}
	return nil
}

// search is one layout's sustained-rate search over ascending rates: up
// from the start while sustained (a higher rate will not be sustained once
// a lower one is not), and down from the start while not.
type search struct {
	rates    []float64
	i, start int // the rate to probe next; where the search started
	best     float64
	done     bool
}

// newSearch starts at from when it is one of rates, else at the lowest.
func newSearch(rates []float64, from float64) *search {
	i := max(0, slices.Index(rates, from))
	return &search{rates: rates, i: i, start: i}
}

// next is the rate to probe, false once the search is over.
func (s *search) next() (float64, bool) {
	if s.done || s.i < 0 || s.i >= len(s.rates) {
		return 0, false
	}
	return s.rates[s.i], true
}

// record takes the verdict on the rate next returned.
func (s *search) record(sustained bool) {
	switch {
	case sustained:
		s.best = s.rates[s.i]
		s.done = s.i < s.start // stepping down: the first sustained rate is the best
		s.i++
	case s.best == 0 && s.i <= s.start:
		s.i--
	default:
		s.done = true
	}
}

func mariadbLabel(m string) string {
	if m == "tuned" {
		return "throwaway mariadbd tuned for throughput (buffer pool 1G, " + strings.Join(tunedMariaDB, " ") + ", no binlog)"
	}
	return "local server as configured"
}

// result is one run at one rate.
type result struct {
	config        string
	layout        string
	rate          float64 // asked
	achieved      float64 // inserted / wall time of the writer
	wall          time.Duration
	relayed       report.Samples
	mysql         *report.Samples // mic events only: the consumption table's rows
	closed        report.Samples
	cpu           map[string]time.Duration
	lag           map[string]*report.Series // seconds of traffic over time
	sustained     bool
	why           string
	incomplete    int // events not through every stage by the end
	writerLateMax time.Duration
}

// measure starts the components on c, writes rate events/s for d, waits
// for the pipeline to drain (latency runs) and stops the components.
func (b *bench) measure(ctx context.Context, name, layout string, c config.Config, rate float64, d time.Duration, sustain bool) (*result, error) {
	b.seq++
	n := int(rate * d.Seconds())
	events := b.events(n)
	res := &result{config: name, layout: layout, rate: rate, cpu: map[string]time.Duration{}, lag: map[string]*report.Series{}, mysql: &report.Samples{}}

	// publish-im runs without its outbox worker, so every row stays
	// pending: its backlog gauges count at most imoutbox.BacklogCountCap
	// index entries per status, however many runs came before.
	var children []*rfproc.Child
	defer func() {
		for _, ch := range children {
			_ = ch.Stop(15 * time.Second)
		}
	}()
	for i, comp := range layoutProcs[layout] {
		c := c
		if b.o.metricsPort > 0 {
			c.Metrics.Addr = fmt.Sprintf("127.0.0.1:%d", b.o.metricsPort+i)
		}
		// The same instance id every run: a static member restarted
		// takes its partitions straight back, as a restarted pod does,
		// instead of waiting for the former member's session to end.
		var args []string
		if comp == "sink" || comp == "run" {
			args = []string{"--parallelism", strconv.Itoa(b.o.sinkPar)}
		}
		ch, err := b.env.Runner.Start(rfproc.Spec{Command: comp, ID: comp, InstanceID: true, Config: &c, Args: args})
		if err != nil {
			return nil, err
		}
		children = append(children, ch)
	}
	rt, err := b.begin(ctx, c, events)
	if err != nil {
		return nil, err
	}
	defer rt.stop()
	tl, closed := rt.rooms, rt.closed
	events, ids := events[rt.warm:], rt.ids[rt.warm:]
	// A run after one the pipeline did not keep up with starts once that
	// backlog is gone, so it does not measure the previous run's lag.
	if err := b.awaitNoLag(ctx, c, 2*time.Minute); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
	}

	cpu0 := map[string]time.Duration{}
	for _, ch := range children {
		cpu0[ch.Command], _ = ch.CPU()
	}
	oth := map[string]map[int]time.Duration{}
	for k, pids := range others(b.o.mariadb == "tuned") {
		oth[k] = cpuSnap(pids)
	}
	commits, err := b.drive(ctx, c, res, tl, events, ids, rate, nil)
	if err != nil {
		return nil, err
	}
	if sustain {
		res.judge()
	}
	// Let the last events through (latency runs: every event counts).
	drain := 30 * time.Second
	if sustain {
		drain = 0
	}
	_ = tl.Await(ctx, ids, drain)
	if err := b.waitConsumed(ctx, events, drain); err != nil && !sustain {
		fmt.Fprintln(os.Stderr, "e2e:", err)
	}
	for _, ch := range children {
		cur, _ := ch.CPU()
		res.cpu[ch.Command] = cur - cpu0[ch.Command]
	}
	for k, before := range oth {
		res.cpu[k] = cpuSince(before)
	}
	if !sustain {
		if err := b.latencies(ctx, res, tl, closed, events, commits); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// drive inserts events at rate (b.o.writers transactions at once, each
// of 10 ms of traffic) and samples every stage's lag into res.lag once a
// second until the last row is committed; at, when not nil, is called at
// every sample with the seconds since the start (scale-out actions). It
// returns each event's commit time and sets res.wall, res.achieved and
// res.writerLateMax.
func (b *bench) drive(ctx context.Context, c config.Config, res *result, tl *rfproc.Tail, events []loadgen.Event, ids []string, rate float64,
	at func(elapsed float64) error) ([]time.Time, error) {
	commits := make([]time.Time, len(events))
	var written, dispatched int // committed rows; highest row committed
	var mu sync.Mutex
	start := time.Now()
	wctx, cancelW := context.WithCancel(ctx)
	defer cancelW()
	werr := make(chan error, 1)
	go func() {
		// Transactions of 10 ms of traffic each, due at the rate, inserted
		// by -writers connections at once as a room service's many
		// requests commit side by side (one connection alone is bound by
		// MySQL's commit latency, not by the pipeline). A room's events
		// always go through the same connection, in order: the room
		// service commits one room's changes one after the other (its
		// room_version), and the pipeline relies on that order.
		batch := max(1, int(rate/100))
		work := make([]chan []int, b.o.writers)
		var wg sync.WaitGroup
		var failed error
		var fmu sync.Mutex
		for w := range work {
			work[w] = make(chan []int, 64)
			wg.Go(func() {
				var rows []loadgen.Event
				for idx := range work[w] {
					// What queued up while the last transaction ran goes
					// into the next one: a slow commit means a bigger
					// transaction, not a growing queue (group commit, as a
					// busy service's connection pool does).
				more:
					for len(idx) < 2000 {
						select {
						case next, ok := <-work[w]:
							if !ok {
								break more
							}
							idx = append(idx, next...)
						default:
							break more
						}
					}
					rows = rows[:0]
					for _, k := range idx {
						rows = append(rows, events[k])
					}
					if _, err := loadgen.WriteOutbox(wctx, b.env.DB, rows, len(rows), 0); err != nil {
						fmu.Lock()
						failed = cmp.Or(failed, err)
						fmu.Unlock()
						cancelW()
						continue
					}
					now := time.Now()
					mu.Lock()
					for _, k := range idx {
						commits[k] = now
						dispatched = max(dispatched, k+1)
					}
					written += len(idx)
					mu.Unlock()
				}
			})
		}
		for i := 0; i < len(events) && wctx.Err() == nil; i += batch {
			due := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
			if late := time.Since(due); late > res.writerLateMax {
				res.writerLateMax = late
			} else if late < 0 {
				select {
				case <-wctx.Done():
				case <-time.After(-late):
				}
			}
			parts := make([][]int, len(work))
			for k := i; k < min(i+batch, len(events)); k++ {
				h := fnv.New32a()
				_, _ = h.Write([]byte(events[k].Envelope.RoomId))
				w := int(h.Sum32() % uint32(len(work)))
				parts[w] = append(parts[w], k)
			}
			for w, idx := range parts {
				if len(idx) == 0 {
					continue
				}
				select {
				case work[w] <- idx:
				case <-wctx.Done():
				}
			}
		}
		for _, ch := range work {
			close(ch)
		}
		wg.Wait()
		werr <- cmp.Or(failed, ctx.Err())
	}()

	groups := []string{c.Process.RoomGroup, c.Process.MicGroup, c.Sink.Group}
	stages := []string{"relay", "room processor", "mic processor", "sink"}
	for _, s := range stages {
		res.lag[s] = report.NewSeries(s)
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var werrV error
	done := false
	for !done {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case werrV = <-werr:
			done = true
		case <-tick.C:
			mu.Lock()
			w, d := written, dispatched
			mu.Unlock()
			x := time.Since(start).Seconds()
			res.lag["relay"].Add(x, float64(w-tl.Count(ids[:d]))/rate)
			if at != nil {
				if err := at(x); err != nil {
					return nil, err
				}
			}
			if lags, err := b.env.Admin.Lag(ctx, groups...); err == nil {
				for i, g := range groups {
					if l, ok := lags[g]; ok {
						res.lag[stages[i+1]].Add(x, float64(l.Lag.Total())/rate)
					}
				}
			}
		}
	}
	if werrV != nil {
		return nil, werrV
	}
	res.wall = time.Since(start)
	res.achieved = float64(len(events)) / res.wall.Seconds()
	return commits, nil
}

// awaitNoLag waits until the processors' and the sink's consumer groups
// are caught up, at most timeout; it fails with the lag left. Caught up is
// at most 100 records: a committed position can stay below a transaction's
// end marker.
func (b *bench) awaitNoLag(ctx context.Context, c config.Config, timeout time.Duration) error {
	groups := []string{c.Process.RoomGroup, c.Process.MicGroup, c.Sink.Group}
	deadline := time.Now().Add(timeout)
	for {
		lags, err := b.env.Admin.Lag(ctx, groups...)
		left := int64(0)
		for _, g := range groups {
			if l, ok := lags[g]; ok {
				left += l.Lag.Total()
			}
		}
		if err == nil && left <= 100 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d records of earlier runs still unconsumed after %s (%v)", left, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// running is a run's tails and its events' ids, after the warm-up.
type running struct {
	rooms, closed *rfproc.Tail
	ids           []string
	warm          int // events written as the warm-up
}

func (r *running) stop() { r.rooms.Stop(); r.closed.Stop() }

// begin starts the tails of a run and writes its warm-up: the first few of
// events, through the room events topic before the clock starts (the
// groups have joined and the first events flowed; excluded from samples).
func (b *bench) begin(ctx context.Context, c config.Config, events []loadgen.Event) (*running, error) {
	rooms, err := rfproc.StartTail(ctx, c.Kafka, "e2e-tail", c.Kafka.Topics.RoomEvents, rfproc.EventIDHeader)
	if err != nil {
		return nil, err
	}
	closed, err := closedTail(ctx, c)
	if err != nil {
		rooms.Stop()
		return nil, err
	}
	r := &running{rooms: rooms, closed: closed, ids: make([]string, len(events)), warm: min(200, len(events)/10)}
	for i, e := range events {
		r.ids[i] = e.Envelope.EventId
	}
	if _, err := loadgen.WriteOutbox(ctx, b.env.DB, events[:r.warm], r.warm, 0); err == nil {
		err = rooms.Await(ctx, r.ids[:r.warm], 2*time.Minute)
	}
	if err != nil {
		r.stop()
		return nil, fmt.Errorf("warm-up: %w", err)
	}
	return r, nil
}

// closedTail tails the UserMicSessionClosed topic; a session's close is
// known by the event that closed it (closed_event_id).
func closedTail(ctx context.Context, c config.Config) (*rfproc.Tail, error) {
	return rfproc.StartTail(ctx, c.Kafka, "e2e-closed-tail", c.Kafka.Topics.MicSessionClosed, func(r *kgo.Record) (string, bool) {
		var m userv1.UserMicSessionClosed
		if err := proto.Unmarshal(r.Value, &m); err != nil {
			return "", false
		}
		return m.ClosedEventId, true
	})
}

// judge applies the sustained-rate criteria to the lag series.
func (r *result) judge() {
	r.sustained = true
	for s, ser := range r.lag {
		pts := ser.Points()
		if len(pts) == 0 {
			r.sustained, r.why = false, s+": no lag samples"
			return
		}
		last := pts[len(pts)-1]
		if last.Y > 2 {
			r.sustained, r.why = false, fmt.Sprintf("%s lag %.1fs of traffic at the end (> 2s)", s, last.Y)
			return
		}
		// Growing: the mean of the window's last 10 s above the first 10
		// s's by more than 0.5 s of traffic.
		var first, lastW []float64
		for _, p := range pts {
			if p.X >= last.X-30 && p.X < last.X-20 {
				first = append(first, p.Y)
			}
			if p.X > last.X-10 {
				lastW = append(lastW, p.Y)
			}
		}
		if mean(lastW) > mean(first)+0.5 {
			r.sustained, r.why = false, fmt.Sprintf("%s lag grew from %.1fs to %.1fs of traffic over the last 30s", s, mean(first), mean(lastW))
			return
		}
	}
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// events generates n events of the default mix under a prefix of this run.
func (b *bench) events(n int) []loadgen.Event {
	sc := loadgen.DefaultScenario()
	// The default scenario is ~2.3 events per gift and session: scale it
	// to n (plus the warm-up), keeping its proportions.
	base, _ := sc.Generate()
	k := float64(n+200)/float64(len(base)) + 0.01
	sc.Sessions, sc.Gifts = int(float64(sc.Sessions)*k)+1, int(float64(sc.Gifts)*k)+1
	sc.Users, sc.Rooms = int(float64(sc.Users)*k)+1, int(float64(sc.Rooms)*k)+1
	sc.EventIDPrefix = fmt.Sprintf("e2e%d", b.seq)
	sc.Seed = uint64(b.seq)
	evs, _ := sc.Generate()
	return evs[:min(len(evs), n+200)]
}

func (b *bench) waitConsumed(ctx context.Context, events []loadgen.Event, timeout time.Duration) error {
	want := 0
	for _, e := range events {
		if e.Envelope.EventType == "RoomMicChanged" {
			want++
		}
	}
	prefix := strings.SplitN(events[0].Envelope.EventId, "-", 2)[0] + "-%"
	deadline := time.Now().Add(timeout)
	for {
		var got int
		if err := b.env.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM user_mic_event_consumption WHERE app_code = ? AND event_id LIKE ?", b.env.Config.AppCode, prefix).Scan(&got); err != nil {
			return err
		}
		if got >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d mic events consumed after %s", got, want, timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// latencies fills r's samples from the tails and, for the mic events,
// their user_mic_event_consumption rows (live.FactLatency, as `roomflow
// loadgen` measures it, every event here).
func (b *bench) latencies(ctx context.Context, r *result, tl, closed *rfproc.Tail, events []loadgen.Event, commits []time.Time) error {
	lat := live.NewFactLatency(b.env.DB, b.env.Config.AppCode, live.LatencyOptions{MaxPending: len(events)})
	for i, e := range events {
		id := e.Envelope.EventId
		if at, ok := tl.Seen(id); ok {
			r.relayed.Add(at.Sub(commits[i]))
		}
		if at, ok := closed.Seen(id); ok {
			r.closed.Add(at.Sub(commits[i]))
		}
		if e.Envelope.EventType == "RoomMicChanged" {
			lat.Committed(id, commits[i])
		}
	}
	if err := lat.Poll(ctx); err != nil {
		return err
	}
	r.mysql = lat.Samples()
	r.incomplete = len(events) - r.relayed.Len()
	return nil
}

func (r *result) cpuLine() string {
	var parts []string
	total := time.Duration(0)
	for _, k := range cpuKeys(r.layout) {
		c := r.cpu[k]
		total += c
		parts = append(parts, fmt.Sprintf("%s %.2f CPU-s (%.0f%% of %d cores)", k, c.Seconds(), share(c, r.wall), runtime.NumCPU()))
	}
	return fmt.Sprintf("%s; total %.0f%%", strings.Join(parts, ", "), share(total, r.wall))
}

func share(c, wall time.Duration) float64 {
	return 100 * c.Seconds() / (wall.Seconds() * float64(runtime.NumCPU()))
}

func (r *result) print() {
	fmt.Printf("\n%s, %s config, %.0f events/s asked, %.0f achieved over %.1fs (writer at most %s late)\n", r.layout, r.config, r.rate, r.achieved, r.wall.Seconds(), r.writerLateMax.Round(time.Millisecond))
	fmt.Printf("  insert → room events topic:       %s\n", r.relayed.Summary())
	fmt.Printf("  insert → MySQL consumption row:   %s\n", r.mysql.Summary())
	fmt.Printf("  down insert → UserMicSessionClosed: %s\n", r.closed.Summary())
	fmt.Printf("  CPU: %s\n", r.cpuLine())
	if r.incomplete > 0 {
		fmt.Printf("  %d events not on the room events topic by the end\n", r.incomplete)
	}
}

func (r *result) printSustain(l *limit) {
	verdict := "sustained"
	if !r.sustained {
		verdict = "NOT sustained: " + r.why
	}
	fmt.Printf("\n%s, sustained-rate probe %.0f events/s (achieved %.0f over %.1fs%s): %s\n  CPU: %s\n", r.layout, r.rate, r.achieved, r.wall.Seconds(), l.share(r.achieved), verdict, r.cpuLine())
	for _, s := range []string{"relay", "room processor", "mic processor", "sink"} {
		if p, ok := r.lag[s].Last(); ok {
			fmt.Printf("  %-15s lag at the end %.2fs of traffic\n", s, p.Y)
		}
	}
}

// limit is the raw MySQL limit of the run (rawLimit).
type limit struct {
	events, mic int           // events of the mix; mic events among them (ledger entries)
	outbox      time.Duration // the room_outbox inserts, start to last commit
	ledger      time.Duration // the ledger rows, alongside
	wall        time.Duration // both
}

// rate is the events/s of the mix the server took, both kinds of rows together.
func (l *limit) rate() float64 { return float64(l.events) / l.wall.Seconds() }

// share is ", 0.42 of the raw limit" for a rate, empty without a limit.
func (l *limit) share(rate float64) string {
	if l == nil {
		return ""
	}
	return fmt.Sprintf(", %.2f of the raw limit", rate/l.rate())
}

func (l *limit) String() string {
	return fmt.Sprintf("%.0f events/s of the mix: %d room_outbox rows in %.1fs (%.0f/s) while the ledger rows of its %d mic events went in over %.1fs (%.0f entries/s)",
		l.rate(), l.events, l.outbox.Seconds(), float64(l.events)/l.outbox.Seconds(), l.mic, l.ledger.Seconds(), float64(l.mic)/l.ledger.Seconds())
}

func (l *limit) print() {
	fmt.Printf("\nraw MySQL limit (same server, plain multi-row statements): %s\n", l)
}

// rawLimit measures the server's limit for the fact path's rows of n events
// of the mix on a scratch database of its own: the room_outbox rows on
// -writers connections, 500 rows per transaction, while the mic ledger's
// rows of as many entries as the mix has mic events go in on
// -sink-parallelism connections in batches of sink.batch_size. It leaves
// out what roomflow reads (the relay's polls, the sink's dedupe) and the
// lucky pool rows.
func (b *bench) rawLimit(ctx context.Context, n int) (limit, error) {
	b.seq++
	events := b.events(n)[:n]
	l := limit{events: n}
	for _, e := range events {
		if e.Envelope.EventType == "RoomMicChanged" {
			l.mic++
		}
	}
	ledger := sinktest.NewLedgerGen(uint64(b.seq), b.env.Config.AppCode, max(1000, l.mic/40)).Next(l.mic)
	scratch, err := mysqlx.NewScratch(ctx, b.o.server, fmt.Sprintf("%s_raw%d", b.env.DBName, b.seq), true)
	if err != nil {
		return l, err
	}
	defer func() { _ = scratch.Drop(context.Background()) }()
	mc := b.env.Config.MySQL
	mc.DSN = scratch.DSN
	db, err := mysqlx.Open(ctx, mc)
	if err != nil {
		return l, err
	}
	defer db.Close()
	db.SetMaxOpenConns(b.o.writers + b.o.sinkPar)
	var g errgroup.Group
	start := time.Now()
	var mu sync.Mutex
	done := func(d *time.Duration) {
		mu.Lock()
		*d = max(*d, time.Since(start))
		mu.Unlock()
	}
	for w := range b.o.writers {
		part := events[w*n/b.o.writers : (w+1)*n/b.o.writers]
		g.Go(func() error {
			_, err := loadgen.WriteOutbox(ctx, db, part, 500, 0)
			done(&l.outbox)
			return err
		})
	}
	for p := range b.o.sinkPar {
		var part []*userv1.MicLedgerEntry
		for _, e := range ledger {
			if int(e.UserId%int64(b.o.sinkPar)) == p { // a user's entries in order, as a partition has them
				part = append(part, e)
			}
		}
		g.Go(func() error {
			err := rawledger.Write(ctx, db, part, b.env.Config.Sink.BatchSize, true)
			done(&l.ledger)
			return err
		})
	}
	err = g.Wait()
	l.wall = time.Since(start)
	return l, err
}

// results is what -out writes.
type results struct {
	mariadb, sink    string
	limit            *limit
	latency, sustain []*result
}

func (rs *results) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var md strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&md, "# roomflow end to end, %s\n\nMachine: %s, %d CPUs (shared with other work: compare runs of one invocation only). Layout \"processes\": one `roomflow` process per component (%s); \"run\": all in one `roomflow run`. kfake 3 brokers in a child process. MySQL: %s. Sink: %s.\n\n",
		time.Now().UTC().Format(time.DateOnly), host, runtime.NumCPU(), strings.Join(components, ", "), rs.mariadb, rs.sink)
	shares := func(r *result) string {
		var out []string
		for _, k := range cpuKeys(r.layout) {
			out = append(out, fmt.Sprintf("%s %.0f%%", k, share(r.cpu[k], r.wall)))
		}
		return strings.Join(out, ", ")
	}
	md.WriteString("## Latency from room_outbox insert commit\n\n| layout | config | rate asked | achieved | → room events p50/p99/p999 ms | → MySQL row p50/p99/p999 ms | → SessionClosed p50/p99/p999 ms | CPU share of the cores |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range rs.latency {
		ms := func(s *report.Samples) string {
			m := s.Summary()
			f := func(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 1, 64) }
			return f(m.P50) + " / " + f(m.P99) + " / " + f(m.P999)
		}
		fmt.Fprintf(&md, "| %s | %s | %.0f | %.0f | %s | %s | %s | %s |\n", r.layout, r.config, r.rate, r.achieved, ms(&r.relayed), ms(r.mysql), ms(&r.closed), shares(r))
	}
	// Per layout, config and rate (repeated runs together): the spread,
	// and the median of each percentile for the chart.
	type key struct {
		layout, config string
		rate           float64
	}
	var order []key
	groups := map[key][]*result{}
	for _, r := range rs.latency {
		k := key{r.layout, r.config, r.rate}
		if groups[k] == nil {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	repeated := len(rs.latency) > len(order)
	if repeated {
		md.WriteString("\nSpread of the repeated runs, min / median / max of p99 (ms):\n\n| layout | config | rate | runs | → room events | → MySQL row | → SessionClosed |\n| --- | --- | --- | --- | --- | --- | --- |\n")
	}
	layouts := map[string]bool{}
	for _, k := range order {
		layouts[k.layout] = true
	}
	// One layout: p50, p99 and p999 per config; more: p50 and p99 only.
	quantiles := []string{"p50", "p99", "p999"}
	if len(layouts) > 1 {
		quantiles = quantiles[:2]
	}
	lat := map[string]*report.Series{}
	var series []*report.Series
	for _, k := range order {
		g := groups[k]
		pick := func(f func(*result) report.Summary, q func(report.Summary) time.Duration) []float64 {
			var v []float64
			for _, r := range g {
				v = append(v, float64(q(f(r)))/1e6)
			}
			slices.Sort(v)
			return v
		}
		mysqlOf := func(r *result) report.Summary { return r.mysql.Summary() }
		qs := map[string]func(report.Summary) time.Duration{
			"p50": func(m report.Summary) time.Duration { return m.P50 }, "p99": func(m report.Summary) time.Duration { return m.P99 },
			"p999": func(m report.Summary) time.Duration { return m.P999 }}
		med := func(v []float64) float64 { return v[len(v)/2] }
		for _, q := range quantiles {
			name := k.config + " " + q
			if len(layouts) > 1 {
				name = k.layout + " " + name
			}
			if lat[name] == nil {
				lat[name] = report.NewSeries(name)
				series = append(series, lat[name])
			}
			lat[name].Add(k.rate, med(pick(mysqlOf, qs[q])))
		}
		if repeated {
			spread := func(v []float64) string { return fmt.Sprintf("%.0f / %.0f / %.0f", v[0], med(v), v[len(v)-1]) }
			fmt.Fprintf(&md, "| %s | %s | %.0f | %d | %s | %s | %s |\n", k.layout, k.config, k.rate, len(g),
				spread(pick(func(r *result) report.Summary { return r.relayed.Summary() }, qs["p99"])), spread(pick(mysqlOf, qs["p99"])),
				spread(pick(func(r *result) report.Summary { return r.closed.Summary() }, qs["p99"])))
		}
	}
	if len(series) > 0 {
		if err := report.WriteSVGFile(filepath.Join(dir, "e2e-latency.svg"), report.LineChart{Title: "insert commit → MySQL consumption row", XLabel: "events/s", YLabel: "ms", Series: series}); err != nil {
			return err
		}
		md.WriteString("\n![latency vs rate](e2e-latency.svg)\n")
	}
	if rs.limit != nil {
		fmt.Fprintf(&md, "\n## Raw MySQL limit\n\nThe same server, plain multi-row statements, no roomflow: %s.\n", rs.limit)
	}
	if len(rs.sustain) > 0 {
		md.WriteString("\n## Sustained rate (default config)\n\n| layout | rate asked | achieved | of the raw limit | verdict | CPU share of the cores |\n| --- | --- | --- | --- | --- | --- |\n")
		last := map[string]*result{}
		var lastOrder []string
		for _, r := range rs.sustain {
			v := "sustained"
			if !r.sustained {
				v = "not sustained: " + r.why
			}
			of := "—"
			if rs.limit != nil {
				of = fmt.Sprintf("%.2f", r.achieved/rs.limit.rate())
			}
			fmt.Fprintf(&md, "| %s | %.0f | %.0f | %s | %s | %s |\n", r.layout, r.rate, r.achieved, of, v, shares(r))
			if last[r.layout] == nil {
				lastOrder = append(lastOrder, r.layout)
			}
			last[r.layout] = r
		}
		for _, layout := range lastOrder {
			r := last[layout]
			var series []*report.Series
			for _, s := range []string{"relay", "room processor", "mic processor", "sink"} {
				series = append(series, r.lag[s])
			}
			name := "e2e-lag-" + layout + ".svg"
			if err := report.WriteSVGFile(filepath.Join(dir, name), report.LineChart{Title: fmt.Sprintf("%s: lag at %.0f events/s", layout, r.rate), XLabel: "s", YLabel: "s of traffic", Series: series}); err != nil && !errors.Is(err, report.ErrEmptyChart) {
				return err
			}
			fmt.Fprintf(&md, "\n![lag of the last %s probe](%s)\n", layout, name)
		}
	}
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(md.String()), 0o644)
}
