// Command compare is the Go half of make bench-compare
// (benchmarks/compare.sh): it runs the stage benchmarks of two builds, or
// of one build in two modes, interleaved on the same machine and MariaDB
// server, and prints each figure of A and B side by side with the ratio
// B/A, flagging only the changes the rounds can tell from noise.
//
//	compare check -bench relay,mic -rounds 4      # validate; print the benchmarks and rounds
//	compare run -a DIR -b DIR -bench ... -rounds N -out DIR [-args ...] [-a-args ...] [-b-args ...]
//	compare table -raw DIR/raw.tsv                # the table again from the raw figures
//
// A side is a directory holding one binary per benchmark (go build
// ./benchmarks/<name>); a missing binary is a benchmark that side does not
// have. Each slot is one run of one benchmark (one round where the
// benchmark has -rounds), its own kfake as always; the rounds go A B A B
// so both sides see the same minutes of a shared, noisy machine.
//
// Exit status: 2 for bad input (unknown benchmark, rounds not a number or
// below 2, MariaDB not reachable, a flag no selected benchmark takes), 1
// when a run cannot be started or nothing could be compared.
package main

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	_ "github.com/go-sql-driver/mysql" // the driver of sql.Open

	"github.com/hyapp/roomflow/benchmarks/internal/benchparse"
)

// defaultRounds is the largest count for which the default comparison
// (every benchmark of profiles) fits in 15 minutes on the 2-core machine
// it was sized on; docs/performance.md gives the measured time.
const defaultRounds = 6

// profiles are the arguments of one comparison slot per benchmark: one
// round, an input large enough for a stable figure, small enough that the
// rounds fit. -mysql is added for the benchmarks that take it.
var profiles = map[string][]string{
	"relay":      {"-rows=200000", "-rate=2000", "-latency-duration=5s"},
	"processors": {"-events=300000", "-rounds=1"},
	"mic":        {"-events=200000", "-open=100000", "-rounds=1"},
	"sink":       {"-entries=40000", "-naive=300", "-rounds=1", "-private=false"}, // the shared server, not a throwaway mariadbd per run
	"im":         {"-rate=150", "-duration=5s"},
	"lucky":      {"-rounds=1", "-draws=4000", "-naive-draws=300", "-rate=0"},
}

// errUsage marks bad input: exit status 2.
var errUsage = errors.New("usage")

func usagef(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errUsage}, a...)...)
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: compare check|run|table [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "check":
		err = check(os.Args[2:])
	case "run":
		err = runCmd(os.Args[2:])
	case "table":
		err = tableCmd(os.Args[2:])
	default:
		err = usagef("unknown command %q (check, run or table)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-compare:", strings.TrimPrefix(err.Error(), errUsage.Error()+": "))
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// selection is what BENCH and ROUNDS resolve to.
type selection struct {
	benches []string
	rounds  int
	dsn     string
}

func selectionFlags(fs *flag.FlagSet) func() (selection, error) {
	bench := fs.String("bench", "", "comma-separated benchmarks (empty: "+strings.Join(benchparse.MeasuredBenchmarks(), ",")+")")
	rounds := fs.String("rounds", "", "rounds per side (empty: "+strconv.Itoa(defaultRounds)+")")
	dsn := fs.String("mysql", cmp.Or(os.Getenv("ROOMFLOW_TEST_MYSQL_DSN"), "root@tcp(127.0.0.1:3306)/"), "the MariaDB server every benchmark uses")
	return func() (selection, error) {
		s := selection{rounds: defaultRounds, dsn: *dsn}
		if *rounds != "" {
			n, err := strconv.Atoi(*rounds)
			if err != nil || n < 2 {
				return s, usagef("ROUNDS=%q: a number of at least 2 (one round cannot show a spread)", *rounds)
			}
			s.rounds = n
		}
		if strings.TrimSpace(*bench) == "" {
			s.benches = benchparse.MeasuredBenchmarks()
		}
		for _, b := range strings.Split(*bench, ",") {
			if b = strings.TrimSpace(b); b == "" {
				continue
			}
			if _, ok := profiles[b]; !ok {
				why := "not a benchmark"
				if b == "e2e" || b == "failover" {
					why = "needs a roomflow binary per side and minutes a run: measure it with make bench"
				}
				return s, usagef("BENCH: %q: %s; bench-compare runs %s", b, why, strings.Join(benchparse.MeasuredBenchmarks(), ", "))
			}
			s.benches = append(s.benches, b)
		}
		return s, nil
	}
}

// pingMySQL fails with a usage error when the server is not reachable:
// every benchmark needs it, so nothing is built or run without it.
func pingMySQL(dsn string) error {
	db, err := sql.Open("mysql", dsn)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err = db.PingContext(ctx)
		db.Close()
	}
	if err != nil {
		return usagef("MariaDB not reachable (ROOMFLOW_TEST_MYSQL_DSN or 127.0.0.1:3306): %v", redact(err))
	}
	return nil
}

// redact keeps a DSN's password out of an error the driver built from it.
func redact(err error) string {
	s := err.Error()
	if i := strings.Index(s, "@tcp("); i > 0 {
		if j := strings.LastIndexAny(s[:i], " :\"'"); j >= 0 {
			s = s[:j+1] + "…" + s[i:]
		}
	}
	return s
}

// check validates BENCH, ROUNDS and the server, and prints the benchmarks
// to build (one line) and the rounds (a second line) for the script.
func check(args []string) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	sel := selectionFlags(fs)
	if err := fs.Parse(args); err != nil {
		return usagef("%v", err)
	}
	s, err := sel()
	if err != nil {
		return err
	}
	if err := pingMySQL(s.dsn); err != nil {
		return err
	}
	fmt.Println(strings.Join(s.benches, " "))
	fmt.Println(s.rounds)
	return nil
}

func runCmd(args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	sel := selectionFlags(fs)
	c := config{a: side{name: "A"}, b: side{name: "B"}}
	fs.StringVar(&c.a.dir, "a", "", "directory of side A's benchmark binaries")
	fs.StringVar(&c.b.dir, "b", "", "directory of side B's benchmark binaries")
	fs.StringVar(&c.a.label, "a-label", "A", "what side A is")
	fs.StringVar(&c.b.label, "b-label", "B", "what side B is")
	fs.StringVar(&c.a.extra, "a-args", "", "flags for side A only")
	fs.StringVar(&c.b.extra, "b-args", "", "flags for side B only")
	fs.StringVar(&c.common, "args", "", "flags for both sides, after the profile's")
	fs.StringVar(&c.out, "out", "", "directory for the table, the raw figures and every run's output")
	started := fs.Int64("started", 0, "unix time the comparison started (the script's builds count in its elapsed time)")
	fs.DurationVar(&c.timeout, "run-timeout", 15*time.Minute, "limit of one benchmark run")
	if err := fs.Parse(args); err != nil {
		return usagef("%v", err)
	}
	s, err := sel()
	if err != nil {
		return err
	}
	if c.a.dir == "" || c.b.dir == "" || c.out == "" {
		return usagef("run needs -a, -b and -out")
	}
	if err := pingMySQL(s.dsn); err != nil {
		return err
	}
	c.selection = s
	c.started = time.Now()
	if *started > 0 {
		c.started = time.Unix(*started, 0)
	}
	return compare(context.Background(), c)
}

func tableCmd(args []string) error {
	fs := flag.NewFlagSet("table", flag.ContinueOnError)
	raw := fs.String("raw", "", "raw.tsv of a comparison")
	if err := fs.Parse(args); err != nil {
		return usagef("%v", err)
	}
	rows, err := readRaw(*raw)
	if err != nil {
		return err
	}
	writeTable(os.Stdout, rows)
	return nil
}
