// Package benchparse reads the benchmarks' printed output: the stage
// summary of a make bench run (Stages: each stage's throughput against
// its reference) and the figures of one run that make bench-compare sets
// side by side (Measures). One home for the line formats, so a change of a
// benchmark's Printf is made here once.
package benchparse

import (
	"bufio"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// A Run is one run's throughput of a stage next to its reference from
// the same run (its raw limit, a service limit, or a target).
type Run struct{ Value, Ref float64 }

// A Stage is what one benchmark's output says about one stage.
type Stage struct {
	Name, Unit string
	Ref        string // what the reference is
	Runs       []Run
	None       string // without Runs: the result, when having none is one
}

// Order is the pipeline's order of the benchmarks Stages reads.
var Order = []string{"relay", "processors", "mic", "sink", "im", "lucky", "e2e"}

// Stages reads one benchmark's output (every invocation of a make bench
// run, appended) into its stages; false for a benchmark it does not know.
func Stages(bench, out string) ([]Stage, bool) {
	p, ok := stageParsers[bench]
	if !ok {
		return nil, false
	}
	return p(out), true
}

// stageParsers are keyed by benchmark (the output file's name).
var stageParsers = map[string]func(out string) []Stage{
	"relay":      parseRelay,
	"processors": parseProcessors,
	"mic":        parseMic,
	"sink":       parseSink,
	"im":         parseIM,
	"lucky":      parseLucky,
	"e2e":        parseE2E,
}

func lines(s string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

func num(s string) float64 {
	v, err := strconv.ParseFloat(strings.ReplaceAll(s, ",", ""), 64)
	if err != nil {
		return math.NaN()
	}
	return v
}

var (
	relayRaw   = regexp.MustCompile(`^raw\s*: \d+ events in \S+ = (\d+) events/s`)
	relayRelay = regexp.MustCompile(`^relay : \d+ events in \S+ = (\d+) events/s`)
)

// parseRelay: each invocation's relay rate against the better of the raw
// scans around it.
func parseRelay(out string) []Stage {
	s := Stage{Name: "relay", Unit: "events/s", Ref: "raw scan + produce"}
	raw, rel := 0.0, 0.0
	for _, l := range lines(out) {
		if m := relayRaw.FindStringSubmatch(l); m != nil {
			raw = max(raw, num(m[1]))
		} else if m := relayRelay.FindStringSubmatch(l); m != nil {
			rel = num(m[1])
		} else if strings.HasPrefix(l, "ratio : relay/raw") && rel > 0 && raw > 0 {
			s.Runs = append(s.Runs, Run{rel, raw})
			raw, rel = 0, 0
		}
	}
	return []Stage{s}
}

var procRound = regexp.MustCompile(`^round \d+\s+(raw|room)\s+\d+ events in\s+\S+:\s+(\d+) events/s wall`)

// parseProcessors: each round's room processor against its raw copy.
func parseProcessors(out string) []Stage {
	return []Stage{{Name: "room proc.", Unit: "events/s", Ref: "raw transactional copy", Runs: afterRaw(out, procRound)}}
}

// afterRaw pairs each line re matches with kind (group 1) other than
// "raw" with the "raw" line before it (group 2: the rate), one run each.
func afterRaw(out string, re *regexp.Regexp) []Run {
	var runs []Run
	raw := 0.0
	for _, l := range lines(out) {
		m := re.FindStringSubmatch(l)
		switch {
		case m == nil:
		case m[1] == "raw":
			raw = num(m[2])
		case raw > 0:
			runs = append(runs, Run{num(m[2]), raw})
			raw = 0
		}
	}
	return runs
}

var micLine = regexp.MustCompile(`^  (raw|mic|rawx)\s+(\d+) events/s wall`)

// parseMic: each round's mic processor against the raw copy writing as
// many records (rawx); the totals after "total of" are not a round.
func parseMic(out string) []Stage {
	s := Stage{Name: "mic proc.", Unit: "events/s", Ref: "raw copy, equal output"}
	mic, totals := 0.0, false
	for _, l := range lines(out) {
		switch {
		case strings.HasPrefix(l, "mic processor benchmark:"):
			totals = false
		case strings.HasPrefix(l, " total of "):
			totals = true
		}
		m := micLine.FindStringSubmatch(l)
		switch {
		case m == nil || totals:
		case m[1] == "mic":
			mic = num(m[2])
		case m[1] == "rawx" && mic > 0:
			s.Runs = append(s.Runs, Run{mic, num(m[2])})
			mic = 0
		}
	}
	return []Stage{s}
}

var sinkRound = regexp.MustCompile(`^\s+round \d+ (raw|sink)\s+(\d+) entries/s`)

// parseSink: each round's sink against the raw upserts of the same round.
func parseSink(out string) []Stage {
	return []Stage{{Name: "sink", Unit: "entries/s", Ref: "raw batched upserts", Runs: afterRaw(out, sinkRound)}}
}

var (
	imOffered  = regexp.MustCompile(`^offered (\d+) events/s .*limits: (\d+) calls/s per app`)
	imAccepted = regexp.MustCompile(`^accepted calls/s during load: mean ([\d.]+),`)
)

// parseIM: the accepted calls/s of the invocations offered more than the
// app limit (saturation), against that limit.
func parseIM(out string) []Stage {
	s := Stage{Name: "IM, saturated", Unit: "calls/s", Ref: "Tencent app limit"}
	offered, limit := 0.0, 0.0
	for _, l := range lines(out) {
		if m := imOffered.FindStringSubmatch(l); m != nil {
			offered, limit = num(m[1]), num(m[2])
		} else if m := imAccepted.FindStringSubmatch(l); m != nil && limit > 0 && offered > limit {
			s.Runs = append(s.Runs, Run{num(m[1]), limit})
		}
	}
	return []Stage{s}
}

var luckyRound = regexp.MustCompile(`^\s+round \d+ hot\s+service\s+(\d+) draws/s`)

// luckyTarget is issue 16's hot-path target, the lucky stage's reference:
// a draw has no raw equivalent without the pool locks it is measured with.
const luckyTarget = 2000

// parseLucky: each round's hot-path draws/s against the target.
func parseLucky(out string) []Stage {
	s := Stage{Name: "lucky hot path", Unit: "draws/s", Ref: "target 2,000"}
	for _, l := range lines(out) {
		if m := luckyRound.FindStringSubmatch(l); m != nil {
			s.Runs = append(s.Runs, Run{num(m[1]), luckyTarget})
		}
	}
	return []Stage{s}
}

var (
	e2eLimit = regexp.MustCompile(`^raw MySQL limit .*: (\d+) events/s of the mix`)
	e2eProbe = regexp.MustCompile(`^(\w+), sustained-rate probe (\d+) events/s \(achieved (\d+) .*\): (sustained|NOT sustained)`)
)

// parseE2E: per layout, the highest sustained rate of each invocation
// against that invocation's raw MySQL limit; a layout that sustained none
// of the rates tried says so, with the lowest.
func parseE2E(out string) []Stage {
	byLayout := map[string]*Stage{}
	var order []string
	best := map[string]float64{}
	lowest := map[string]float64{}
	limit := 0.0
	flush := func() {
		for _, k := range order {
			if best[k] > 0 && limit > 0 {
				byLayout[k].Runs = append(byLayout[k].Runs, Run{best[k], limit})
			}
		}
		best, limit = map[string]float64{}, 0
	}
	for _, l := range lines(out) {
		if strings.HasPrefix(l, "roomflow end to end:") {
			flush()
		} else if m := e2eLimit.FindStringSubmatch(l); m != nil {
			limit = num(m[1])
		} else if m := e2eProbe.FindStringSubmatch(l); m != nil {
			layout, asked := m[1], num(m[2])
			if byLayout[layout] == nil {
				byLayout[layout] = &Stage{Name: "e2e " + layout, Unit: "events/s", Ref: "raw MySQL limit"}
				order = append(order, layout)
			}
			if lo, ok := lowest[layout]; !ok || asked < lo {
				lowest[layout] = asked
			}
			if m[4] == "sustained" {
				best[layout] = max(best[layout], num(m[3]))
			}
		}
	}
	flush()
	if len(order) == 0 { // no sustained-rate search (QUICK)
		return []Stage{{Name: "e2e sustained", Unit: "events/s", Ref: "raw MySQL limit"}}
	}
	var out2 []Stage
	for _, k := range order {
		s := *byLayout[k]
		if len(s.Runs) == 0 {
			s.None = fmt.Sprintf("none of the rates tried sustained, the lowest %.0f", lowest[k])
		}
		out2 = append(out2, s)
	}
	return out2
}
