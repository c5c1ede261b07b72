// Command lucky benchmarks the lucky gift draw service (services/luckydraw)
// through gRPC against the draw the way LUCKY-7 forbids, in one run on the
// same MariaDB:
//
//	go run ./benchmarks/lucky                 # 10k draws per mode, 64 clients, 3 rounds
//	go run ./benchmarks/lucky -quick          # smaller, for a smoke run
//	go run ./benchmarks/lucky -cpuprofile cpu.out
//	go run ./benchmarks/lucky -mtls          # every gRPC hop over mutual TLS
//
// Two paths, each run by every mode on a fresh migrated database (rule
// versions published with luckydraw.Admin.PublishRule, every pool funded
// in one upsert so that about one draw in eight pays):
//
//   - hot: one room, one gift: every draw locks the same platform, room
//     and gift pool rows and the same room-hourly risk counter;
//   - spread: -rooms rooms and -gifts gifts (1,000 and 50): every draw
//     still locks the platform row.
//
// Modes, all driven by -clients concurrent gRPC clients (closed loop):
//
//   - service: luckydraw.Service with its defaults (group commit of
//     concurrent draws, up to 32 per transaction);
//   - service MaxBatch=1: the same service, one draw per transaction: the
//     first reference;
//   - baseline: one draw per transaction with the wallet credit of a
//     paying draw made inside the transaction, pool rows and counters
//     locked (naive.go), the fake wallet answering in -wallet-latency.
//
// Then a fixed offered rate (-rate draws/s for -rate-duration, open loop,
// latency from each draw's scheduled start) on the hot path against the
// service. Reported: draws/s, p50/p99/p999, statements per draw (counted by
// the client's connection pool: BEGIN and COMMIT included), rows written
// per draw (each inserted or updated row once, the synchronous credit's
// included; -outbox-format draw_events: one lucky_draw_events row per draw
// instead of a lucky_outbox row per event), the service's
// mean batch size (roomflow_lucky_draw_batch_size), medians over -rounds
// with the spread (min-max), and the ratios service/baseline per round.
// After each mode the pools' invariants are checked (balance = funded +
// total_in - total_out >= reserve_floor, Σ total_out = Σ reward_coins, one
// record per answered draw).
//
// -mtls serves the draws (service and baseline alike) with lucky.tls
// (internal/tlsx: client certificates of a throwaway test PKI required,
// room-service's SPIFFE id allowed) and credits the fake wallet over
// mutual TLS; compare with `make bench-compare BENCH=lucky
// A_ARGS=-mtls=false B_ARGS=-mtls=true`.
//
// -randomness commit_reveal draws the service modes' day in commit-reveal
// mode (the day stored before the first draw); compare with `make
// bench-compare BENCH=lucky A_ARGS=-randomness=crypto
// B_ARGS=-randomness=commit_reveal`.
//
// Client, service, fake wallet and MariaDB share the machine's cores.
// Needs MariaDB (-mysql, default ROOMFLOW_TEST_MYSQL_DSN or
// root@tcp(127.0.0.1:3306)/); databases are created and dropped.
package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/services/luckydraw"
	"github.com/hyapp/roomflow/services/luckydraw/luckyoutbox"
	"github.com/hyapp/roomflow/services/luckydraw/wallet"
	"github.com/hyapp/roomflow/services/luckydraw/wallet/walletfake"
)

type opts struct {
	draws, naiveDraws, clients, rounds, rate int
	pipelineDepth                            int
	rooms, gifts, users                      int
	rateDur, walletLatency                   time.Duration
	serverDSN, randomness, outboxFormat      string
	keepDB, dispatch, mtls                   bool
}

func main() {
	var o opts
	flag.IntVar(&o.draws, "draws", 10_000, "draws per service mode and round")
	flag.IntVar(&o.naiveDraws, "naive-draws", 2_000, "draws per round of the baseline and of the MaxBatch=1 service (slower)")
	flag.IntVar(&o.clients, "clients", 64, "concurrent gRPC clients (closed loop)")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds (every mode on a fresh database each round)")
	flag.IntVar(&o.rate, "rate", 1000, "offered draws/s of the fixed-rate run on the hot path (0: skip)")
	flag.DurationVar(&o.rateDur, "rate-duration", 10*time.Second, "length of the fixed-rate run")
	flag.IntVar(&o.rooms, "rooms", 1000, "rooms of the spread path")
	flag.IntVar(&o.gifts, "gifts", 50, "gifts of the spread path")
	flag.IntVar(&o.users, "users", 10_000, "distinct senders")
	flag.DurationVar(&o.walletLatency, "wallet-latency", 5*time.Millisecond, "fake wallet answer latency")
	flag.StringVar(&o.serverDSN, "mysql", cmp.Or(os.Getenv("ROOMFLOW_TEST_MYSQL_DSN"), "root@tcp(127.0.0.1:3306)/"), "MySQL server DSN (throwaway databases are created)")
	flag.IntVar(&modeService.maxBatch, "max-batch", luckydraw.DefaultMaxBatch, "MaxBatch of the service mode (group commit size)")
	flag.IntVar(&o.pipelineDepth, "pipeline-depth", luckydraw.DefaultPipelineDepth, "PipelineDepth of the service modes (batches of one app_code in flight)")
	flag.BoolVar(&o.keepDB, "keep-db", false, "do not drop the databases")
	flag.StringVar(&o.outboxFormat, "outbox-format", luckyoutbox.FormatRows, "lucky.outbox_format of the service modes: rows (a lucky_outbox row per event) or draw_events (one lucky_draw_events row per draw)")
	flag.BoolVar(&o.dispatch, "dispatch", true, "credit paying draws synchronously after commit (luckyoutbox's Credit, the fake wallet); false: wallet_credit_dispatch off, the draw path alone")
	flag.BoolVar(&o.mtls, "mtls", false, "mutual TLS on every gRPC hop (lucky.tls with allowed_client_names, lucky.wallet_tls), certificates from a throwaway test PKI (testenv.MakePKI); false: plaintext")
	flag.StringVar(&o.randomness, "randomness", "crypto", "lucky.randomness of the service modes: crypto or commit_reveal (a seed per day, the senders' nonce counters in the draw transaction; docs/fairness.md)")
	quick := flag.Bool("quick", false, "smoke size: -draws 3000 -naive-draws 500 -rounds 2 -rate-duration 3s (flags given explicitly win)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run (clients, service and wallet) to this file")
	flag.Parse()
	if *quick {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for name, v := range map[string]string{"draws": "3000", "naive-draws": "500", "rounds": "2", "rate-duration": "3s"} {
			if !set[name] {
				_ = flag.Set(name, v)
			}
		}
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchmark:", err)
			os.Exit(1)
		}
		_ = pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	if err := run(o); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "benchmark:", err)
		os.Exit(1)
	}
}

// scenario is a path: how many rooms and gifts the draws spread over.
type scenario struct {
	name         string
	rooms, gifts int
}

// mode is how draws are served: the service with MaxBatch, or the
// baseline (maxBatch 0).
type mode struct {
	name     string
	maxBatch int
}

func (m mode) baseline() bool { return m.maxBatch == 0 }

var (
	modeService = mode{"service", luckydraw.DefaultMaxBatch} // -max-batch
	modeBatch1  = mode{"service MaxBatch=1", 1}
	modeNaive   = mode{"baseline (wallet in locks)", 0}
)

// figures are one mode's measurements in one round.
type figures struct {
	outcome
	batch, retries float64
}

func run(o opts) error {
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	sec, err := newSecurity(o.mtls)
	if err != nil {
		return err
	}
	defer sec.close()
	wal, err := walletfake.Listen(walletfake.Config{Seed: 1, Faults: walletfake.Faults{Latency: o.walletLatency}, TLS: sec.walletServer}, "")
	if err != nil {
		return err
	}
	defer wal.Close()
	wc, err := wallet.New(wallet.Config{Addr: wal.Addr(), TLS: sec.walletClient})
	if err != nil {
		return err
	}
	defer wc.Close()
	producer, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:9")) // never dialled: nothing is produced
	if err != nil {
		return err
	}
	defer producer.Close()
	b := &bench{o: o, wallet: wc, producer: producer, log: log, run: randomHex(), sec: sec}

	fmt.Printf("lucky draw benchmark: %d clients, %d draws per service mode (MaxBatch %d), %d per baseline and MaxBatch=1 mode, %d rounds; fake wallet %s\n",
		o.clients, o.draws, modeService.maxBatch, o.naiveDraws, o.rounds, o.walletLatency)
	if o.dispatch {
		fmt.Println("service: paying draws credited after commit by luckyoutbox's synchronous Credit (claim, wallet, settle; the outbox poller is not run); baseline: credited inside its locks")
	} else {
		fmt.Println("service: wallet_credit_dispatch off (-dispatch=false): paying draws stay PENDING, the draw path alone; baseline: credited inside its locks")
	}
	if o.mtls {
		fmt.Println("transport: mutual TLS (TLS 1.3, ECDSA P-256 test PKI) on the clients' draws and the wallet credits; callers admitted by SPIFFE id")
	} else {
		fmt.Println("transport: plaintext gRPC")
	}
	fmt.Printf("load average at start: %s\n", loadAvg())

	paths := []scenario{{"hot", 1, 1}, {"spread", o.rooms, o.gifts}}
	modes := []mode{modeService, modeBatch1, modeNaive}
	res := map[string][]figures{} // path/mode -> per round
	var rateRes []outcome
	for round := 1; round <= o.rounds; round++ {
		for _, sc := range paths {
			for _, m := range modes {
				n := o.draws
				if m != modeService {
					n = o.naiveDraws
				}
				f, err := b.measure(ctx, sc, m, round, n)
				if err != nil {
					return fmt.Errorf("round %d %s %s: %w", round, sc.name, m.name, err)
				}
				res[sc.name+"/"+m.name] = append(res[sc.name+"/"+m.name], f)
				fmt.Printf("  round %d %-6s %-27s %s\n", round, sc.name, m.name, f.line())
			}
		}
		if o.rate > 0 {
			r, err := b.measureRate(ctx, paths[0], round)
			if err != nil {
				return fmt.Errorf("round %d fixed rate: %w", round, err)
			}
			rateRes = append(rateRes, r)
			fmt.Printf("  round %d %-6s %-27s %s\n", round, "hot", fmt.Sprintf("service at %d/s offered", o.rate), r.rateLine(o.rate))
		}
	}
	fmt.Printf("load average at end: %s\n", loadAvg())
	report(o, paths, modes, res, rateRes)
	return nil
}

func report(o opts, paths []scenario, modes []mode, res map[string][]figures, rateRes []outcome) {
	fmt.Printf("\nmedians of %d rounds (min-max), %d clients, latency through gRPC:\n\n", o.rounds, o.clients)
	fmt.Printf("| path | mode | draws/s | p50 | p99 | p999 | statements/draw | rows/draw | mean batch | hits |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, sc := range paths {
		for _, m := range modes {
			fs := res[sc.name+"/"+m.name]
			batch := "-"
			if !m.baseline() {
				batch = fmt.Sprintf("%.1f", median(pick(fs, func(f figures) float64 { return f.batch })))
			}
			fmt.Printf("| %s | %s | %s | %s | %s | %s | %.1f | %.1f | %s | %.1f%% |\n", sc.name, m.name,
				spread(pick(fs, func(f figures) float64 { return f.rate() }), "%.0f"),
				durSpread(pick(fs, func(f figures) float64 { return f.pct(0.50).Seconds() })),
				durSpread(pick(fs, func(f figures) float64 { return f.pct(0.99).Seconds() })),
				durSpread(pick(fs, func(f figures) float64 { return f.pct(0.999).Seconds() })),
				median(pick(fs, func(f figures) float64 { return f.stmtsPerDraw() })),
				median(pick(fs, func(f figures) float64 { return f.rowsPerDraw() })), batch,
				100*median(pick(fs, func(f figures) float64 { return f.hitRate() })))
		}
	}
	fmt.Println()
	ratios := map[string][]float64{}
	for _, sc := range paths {
		svc := res[sc.name+"/"+modeService.name]
		for _, ref := range []mode{modeNaive, modeBatch1} {
			var rs []float64
			for i, f := range res[sc.name+"/"+ref.name] {
				rs = append(rs, svc[i].rate()/f.rate())
			}
			ratios[sc.name+"/"+ref.name] = rs
			fmt.Printf("%s: service / %s per round %s: median %.1fx\n", sc.name, ref.name, xs(rs), median(rs))
		}
	}
	var p99 []float64
	if len(rateRes) > 0 {
		var p50, p999, achieved []float64
		for _, r := range rateRes {
			p50 = append(p50, r.pct(0.50).Seconds())
			p99 = append(p99, r.pct(0.99).Seconds())
			p999 = append(p999, r.pct(0.999).Seconds())
			achieved = append(achieved, r.rate())
		}
		fmt.Printf("hot, %d draws/s offered for %s: answered %s/s, p50 %s, p99 %s, p999 %s (latency from the scheduled start)\n",
			o.rate, o.rateDur, spread(achieved, "%.0f"), durSpread(p50), durSpread(p99), durSpread(p999))
	}
	hot := median(pick(res["hot/"+modeService.name], func(f figures) float64 { return f.rate() }))
	hotX := median(ratios["hot/"+modeNaive.name])
	fmt.Printf("\ntargets: hot >= 2000 draws/s: %v (%.0f); hot >= 3x baseline: %v (%.1fx)", hot >= 2000, hot, hotX >= 3, hotX)
	if len(p99) > 0 {
		fmt.Printf("; p99 < 50ms at %d/s: %v (%s)", o.rate, median(p99) < 0.05, time.Duration(median(p99)*float64(time.Second)).Round(100*time.Microsecond))
	}
	fmt.Println()
}

func pick(fs []figures, f func(figures) float64) []float64 {
	out := make([]float64, len(fs))
	for i, x := range fs {
		out[i] = f(x)
	}
	return out
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

// spread is "median (min-max)" of v, each formatted with f.
func spread(v []float64, f string) string {
	if len(v) == 0 {
		return "-"
	}
	return fmt.Sprintf(f+" ("+f+"-"+f+")", median(v), minOf(v), maxOf(v))
}

func durSpread(secs []float64) string {
	d := func(s float64) string {
		return time.Duration(s * float64(time.Second)).Round(100 * time.Microsecond).String()
	}
	if len(secs) == 0 {
		return "-"
	}
	return fmt.Sprintf("%s (%s-%s)", d(median(secs)), d(minOf(secs)), d(maxOf(secs)))
}

func minOf(v []float64) float64 {
	m := v[0]
	for _, x := range v {
		m = min(m, x)
	}
	return m
}

func maxOf(v []float64) float64 {
	m := v[0]
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

func xs(v []float64) string {
	out := make([]string, len(v))
	for i, x := range v {
		out[i] = fmt.Sprintf("%.1fx", x)
	}
	return "[" + strings.Join(out, " ") + "]"
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func randomHex() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
