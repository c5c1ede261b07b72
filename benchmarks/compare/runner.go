package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hyapp/roomflow/benchmarks/internal/benchparse"
)

// A side is one of the two things compared.
type side struct {
	name  string // "A" or "B"
	dir   string // its benchmark binaries
	label string
	extra string // its own flags (A_ARGS or B_ARGS)
}

type config struct {
	selection
	a, b    side
	common  string // ARGS
	out     string
	timeout time.Duration
	started time.Time
}

// flagSet is what a benchmark binary accepts: flag name -> takes a value.
type flagSet map[string]bool

// helpFlag is one flag line of Go's flag.PrintDefaults: "  -name type"
// for a flag with a value, "  -name" (or "  -x\tusage") for a boolean.
var helpFlag = regexp.MustCompile(`^  -(\S+?)(?: (\S+))?(?:\t|$)`)

// flagsOf asks a benchmark binary for its flags (-h).
func flagsOf(bin string) (flagSet, error) {
	out, _ := exec.Command(bin, "-h").CombinedOutput() // -h exits 0 or 2 by Go version; the listing is what counts
	fs := flagSet{}
	for _, l := range strings.Split(string(out), "\n") {
		if m := helpFlag.FindStringSubmatch(l); m != nil {
			fs[m[1]] = m[2] != ""
		}
	}
	if len(fs) == 0 {
		return nil, fmt.Errorf("%s -h lists no flags: %s", bin, bytes.TrimSpace(out))
	}
	return fs, nil
}

// flagName is the name of a "-name=value" or "-name" argument.
func flagName(arg string) string {
	name, _, _ := strings.Cut(strings.TrimLeft(arg, "-"), "=")
	return name
}

// normalize splits a flag string (ARGS, A_ARGS, B_ARGS; words split at
// white space, no quoting) into "-name=value" arguments, taking a value
// from the next word for the flags that have one in any of the sets.
func normalize(what, s string, sets []flagSet) ([]string, error) {
	words := strings.Fields(s)
	var out []string
	for i := 0; i < len(words); i++ {
		w := words[i]
		if !strings.HasPrefix(w, "-") || w == "-" || w == "--" {
			return nil, usagef("%s: %q is not a -flag (write -name=value)", what, w)
		}
		name := flagName(w)
		takesValue, known := false, false
		for _, fs := range sets {
			if v, ok := fs[name]; ok {
				known, takesValue = true, takesValue || v
			}
		}
		if !known {
			return nil, usagef("%s: -%s is a flag of none of the selected benchmarks", what, name)
		}
		if !strings.Contains(w, "=") && takesValue {
			if i+1 >= len(words) {
				return nil, usagef("%s: -%s needs a value", what, name)
			}
			i++
			w = "-" + name + "=" + words[i]
		}
		out = append(out, w)
	}
	return out, nil
}

// overlay is args with each flag of over in place of the one of the same
// name, and over's other flags after them.
func overlay(args, over []string) []string {
	out := slices.Clone(args)
	for _, o := range over {
		i := slices.IndexFunc(out, func(a string) bool { return flagName(a) == flagName(o) })
		if i >= 0 {
			out[i] = o
		} else {
			out = append(out, o)
		}
	}
	return out
}

// accepted keeps the arguments fs takes.
func accepted(args []string, fs flagSet) []string {
	var out []string
	for _, a := range args {
		if _, ok := fs[flagName(a)]; ok {
			out = append(out, a)
		}
	}
	return out
}

// A plan is one benchmark's arguments per side, or why it is skipped.
type plan struct {
	bench      string
	argsA      []string
	argsB      []string
	skip       string
	notes      []string
	binA, binB string
}

// plans resolves every benchmark's arguments: the profile and ARGS with
// the flags both sides take (a dropped one is noted), each side's own
// flags where that side takes them.
func plans(c config) ([]plan, error) {
	var ps []plan
	sets := map[string][2]flagSet{}
	var all []flagSet
	for _, b := range c.benches {
		p := plan{bench: b, binA: filepath.Join(c.a.dir, b), binB: filepath.Join(c.b.dir, b)}
		var fsA, fsB flagSet
		var err error
		for _, s := range []struct {
			side side
			bin  string
			fs   *flagSet
		}{{c.a, p.binA, &fsA}, {c.b, p.binB, &fsB}} {
			if _, statErr := os.Stat(s.bin); statErr != nil {
				p.skip = fmt.Sprintf("side %s (%s) has no benchmarks/%s", s.side.name, s.side.label, b)
				break
			}
			if *s.fs, err = flagsOf(s.bin); err != nil {
				return nil, err
			}
		}
		if p.skip == "" {
			sets[b] = [2]flagSet{fsA, fsB}
			all = append(all, fsA, fsB)
		}
		ps = append(ps, p)
	}
	if len(all) == 0 {
		return ps, nil
	}
	common, err := normalize("ARGS", c.common, all)
	if err != nil {
		return nil, err
	}
	extraA, err := normalize("A_ARGS", c.a.extra, all)
	if err != nil {
		return nil, err
	}
	extraB, err := normalize("B_ARGS", c.b.extra, all)
	if err != nil {
		return nil, err
	}
	sameBuild := c.a.dir == c.b.dir
	for i := range ps {
		p := &ps[i]
		if p.skip != "" {
			continue
		}
		fsA, fsB := sets[p.bench][0], sets[p.bench][1]
		base := overlay(append(slices.Clone(profiles[p.bench]), "-mysql="+c.dsn), common)
		var both []string
		for _, a := range base {
			_, okA := fsA[flagName(a)]
			_, okB := fsB[flagName(a)]
			switch {
			case okA && okB:
				both = append(both, a)
			case okA != okB && flagName(a) != "mysql":
				p.notes = append(p.notes, fmt.Sprintf("%s: %s dropped, only side %s takes it", p.bench, redactArg(a), map[bool]string{true: "A", false: "B"}[okA]))
			}
		}
		ownA, ownB := accepted(extraA, fsA), accepted(extraB, fsB)
		for _, x := range []struct {
			name      string
			all, kept []string
		}{{"A_ARGS", extraA, ownA}, {"B_ARGS", extraB, ownB}} {
			if len(x.kept) < len(x.all) && len(x.kept) > 0 {
				p.notes = append(p.notes, fmt.Sprintf("%s: only %s of %s apply", p.bench, strings.Join(x.kept, " "), x.name))
			}
		}
		if sameBuild && slices.Equal(ownA, ownB) && !slices.Equal(extraA, extraB) {
			p.skip = "takes none of the flags A_ARGS and B_ARGS differ in: both sides would run the same"
			continue
		}
		p.argsA, p.argsB = append(slices.Clone(both), ownA...), append(slices.Clone(both), ownB...)
	}
	return ps, nil
}

// redactArg hides a DSN's password in an argument shown in the report.
func redactArg(a string) string {
	if name := flagName(a); name == "mysql" {
		if at := strings.LastIndex(a, "@"); at > 0 {
			if colon := strings.Index(a[:at], ":"); colon > 0 {
				return a[:colon+1] + "…" + a[at:]
			}
		}
	}
	return a
}

// A result is one figure of one run.
type result struct {
	round int
	side  string
	bench string
	m     benchparse.Measure
}

// compare runs the plans' rounds interleaved and writes the report.
func compare(ctx context.Context, c config) error {
	ps, err := plans(c)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.out, 0o755); err != nil {
		return err
	}
	var results []result
	var failures []string
	took := map[string][]float64{} // seconds per run, by benchmark
	for round := 1; round <= c.rounds; round++ {
		for _, p := range ps {
			if p.skip != "" {
				continue
			}
			for _, s := range []struct {
				side side
				bin  string
				args []string
			}{{c.a, p.binA, p.argsA}, {c.b, p.binB, p.argsB}} {
				logf := filepath.Join(c.out, fmt.Sprintf("%s-%s-%d.txt", p.bench, s.side.name, round))
				fmt.Fprintf(os.Stderr, "== round %d/%d %s %s: %s %s\n", round, c.rounds, p.bench, s.side.name, p.bench, strings.Join(redactArgs(s.args), " "))
				t0 := time.Now()
				ms, err := runOnce(ctx, s.bin, s.args, logf, p.bench, c.timeout)
				took[p.bench] = append(took[p.bench], time.Since(t0).Seconds())
				if err != nil {
					failures = append(failures, fmt.Sprintf("round %d, %s, side %s: %v (output: %s)", round, p.bench, s.side.name, err, filepath.Base(logf)))
					fmt.Fprintln(os.Stderr, "   failed:", err)
					continue
				}
				for _, m := range ms {
					results = append(results, result{round, s.side.name, p.bench, m})
				}
			}
		}
	}
	rows := tabulate(results)
	if err := writeRaw(filepath.Join(c.out, "raw.tsv"), results); err != nil {
		return err
	}
	var md bytes.Buffer
	writeReport(&md, c, ps, took, failures, rows)
	if err := os.WriteFile(filepath.Join(c.out, "compare.md"), md.Bytes(), 0o644); err != nil {
		return err
	}
	os.Stdout.Write(md.Bytes())
	fmt.Printf("\nreport: %s, raw figures: %s\n", filepath.Join(c.out, "compare.md"), filepath.Join(c.out, "raw.tsv"))
	if len(rows) == 0 {
		return errors.New("no figure was measured on both sides")
	}
	return nil
}

func redactArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = redactArg(a)
	}
	return out
}

// runOnce runs one benchmark, its output (stdout and stderr) to logf, and
// returns its figures and the whole process's CPU time (the kfake child
// it waits for included).
func runOnce(ctx context.Context, bin string, args []string, logf, bench string, timeout time.Duration) ([]benchparse.Measure, error) {
	f, err := os.Create(logf)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var stdout bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout = io.MultiWriter(f, &stdout)
	cmd.Stderr = f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a timeout kills its kfake child too
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if err := cmd.Run(); err != nil {
		return nil, err
	}
	ms, _ := benchparse.Measures(bench, stdout.String())
	if len(ms) == 0 {
		return nil, errors.New("no figure in its output")
	}
	cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	return append(ms, benchparse.Measure{Stage: bench + " (whole run)", Name: "process CPU", Unit: "s", Value: cpu.Seconds(), LowerIsBetter: true}), nil
}

// tabulate gathers the figures into rows, in the order they first appear;
// a measure printed more than once in one run (a benchmark given more
// than one round) counts by its median.
func tabulate(results []result) []row {
	type slot struct {
		key   string
		round int
		side  string
	}
	perRun := map[slot][]float64{}
	rowOf := map[string]*row{}
	var order []string
	for _, r := range results {
		key := r.bench + "\x00" + r.m.Key()
		if rowOf[key] == nil {
			rowOf[key] = &row{bench: r.bench, m: r.m}
			order = append(order, key)
		}
		s := slot{key, r.round, r.side}
		perRun[s] = append(perRun[s], r.m.Value)
	}
	slots := slices.SortedFunc(maps.Keys(perRun), func(x, y slot) int { return x.round - y.round })
	for _, s := range slots {
		r := rowOf[s.key]
		if s.side == "A" {
			r.a = append(r.a, median(perRun[s]))
		} else {
			r.b = append(r.b, median(perRun[s]))
		}
	}
	rows := make([]row, len(order))
	for i, k := range order {
		rows[i] = *rowOf[k]
	}
	return rows
}

var rawHeader = []string{"round", "side", "benchmark", "stage", "measure", "unit", "lower_is_better", "value"}

// writeRaw writes every figure, one a line, for a note to quote and for
// `compare table` to read back.
func writeRaw(path string, results []result) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	w.Comma = '\t'
	_ = w.Write(rawHeader)
	for _, r := range results {
		_ = w.Write([]string{strconv.Itoa(r.round), r.side, r.bench, r.m.Stage, r.m.Name, r.m.Unit,
			strconv.FormatBool(r.m.LowerIsBetter), strconv.FormatFloat(r.m.Value, 'g', -1, 64)})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func readRaw(path string) ([]row, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, usagef("%v", err)
	}
	defer f.Close()
	r := csv.NewReader(bufio.NewReader(f))
	r.Comma = '\t'
	r.FieldsPerRecord = len(rawHeader)
	recs, err := r.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(recs) == 0 || !slices.Equal(recs[0], rawHeader) {
		return nil, fmt.Errorf("%s: not a raw.tsv of bench-compare (header %v)", path, rawHeader)
	}
	var results []result
	for i, rec := range recs[1:] {
		round, err1 := strconv.Atoi(rec[0])
		lower, err2 := strconv.ParseBool(rec[6])
		v, err3 := strconv.ParseFloat(rec[7], 64)
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, i+2, err)
		}
		results = append(results, result{round, rec[1], rec[2], benchparse.Measure{Stage: rec[3], Name: rec[4], Unit: rec[5], LowerIsBetter: lower, Value: v}})
	}
	return tabulate(results), nil
}

// writeReport is compare.md: what was compared, on which machine, with
// which arguments, what was skipped or failed, the table and the time.
func writeReport(w io.Writer, c config, ps []plan, took map[string][]float64, failures []string, rows []row) {
	fmt.Fprintf(w, "# bench-compare %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(w, "- A: %s\n- B: %s\n", c.a.label, c.b.label)
	fmt.Fprintf(w, "- %d rounds, A B A B …, each run one round on its own kfake; MariaDB %s for every run\n", c.rounds, redactArg("-mysql=" + c.dsn)[len("-mysql="):])
	fmt.Fprintf(w, "- machine: %d CPUs (%s), %s; load average at the end %s\n", runtime.NumCPU(), cpuModel(), runtime.Version(), loadavg())
	fmt.Fprintf(w, "- elapsed: %s (builds included)\n\n", time.Since(c.started).Round(time.Second))
	for _, p := range ps {
		switch {
		case p.skip != "":
			fmt.Fprintf(w, "- %s skipped: %s\n", p.bench, p.skip)
		case slices.Equal(p.argsA, p.argsB):
			fmt.Fprintf(w, "- %s: `%s`; a run %s s\n", p.bench, strings.Join(redactArgs(p.argsA), " "), spread(took[p.bench]))
		default:
			fmt.Fprintf(w, "- %s: A `%s`, B `%s`; a run %s s\n", p.bench, strings.Join(redactArgs(p.argsA), " "), strings.Join(redactArgs(p.argsB), " "), spread(took[p.bench]))
		}
		for _, n := range p.notes {
			fmt.Fprintf(w, "  - %s\n", n)
		}
	}
	for _, f := range failures {
		fmt.Fprintf(w, "- failed run: %s\n", f)
	}
	fmt.Fprintln(w)
	writeTable(w, rows)
}

func cpuModel() string {
	raw, _ := os.ReadFile("/proc/cpuinfo")
	for _, l := range strings.Split(string(raw), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

func loadavg() string {
	raw, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
