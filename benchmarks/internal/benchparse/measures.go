package benchparse

import (
	"math"
	"regexp"
	"strings"
	"time"
)

// A Measure is one figure of one benchmark run: a stage's throughput,
// latency percentile, CPU per event or size. The stages with "(ref.)" in
// their name are the references the benchmark measures beside the
// stage (raw limits, baselines): a change to roomflow's code should leave
// them alone, so they double as a control of the comparison.
type Measure struct {
	Stage, Name, Unit string
	Value             float64
	LowerIsBetter     bool
}

// Key is the measure's identity across runs.
func (m Measure) Key() string { return m.Stage + "\x00" + m.Name }

// Measures reads the output of one benchmark run (one invocation; a
// benchmark given more than one round yields a figure per round, in
// order); false for a benchmark it does not know.
func Measures(bench, out string) ([]Measure, bool) {
	p, ok := measureParsers[bench]
	if !ok {
		return nil, false
	}
	return p(out), true
}

// MeasuredBenchmarks are the benchmarks Measures knows.
func MeasuredBenchmarks() []string {
	var out []string
	for _, b := range Order {
		if measureParsers[b] != nil {
			out = append(out, b)
		}
	}
	return out
}

var measureParsers = map[string]func(string) []Measure{
	"relay":      relayMeasures,
	"processors": processorsMeasures,
	"mic":        micMeasures,
	"sink":       sinkMeasures,
	"im":         imMeasures,
	"lucky":      luckyMeasures,
}

func throughput(stage, unit string, v float64) Measure {
	return Measure{Stage: stage, Name: "throughput", Unit: unit, Value: v}
}

func lower(stage, name, unit string, v float64) Measure {
	return Measure{Stage: stage, Name: name, Unit: unit, Value: v, LowerIsBetter: true}
}

// cpuPerEvent turns a benchmark's "events per CPU-second" into the CPU
// time one event costs, the figure a cost comparison reads.
func cpuPerEvent(stage string, perCPUSecond float64) Measure {
	return lower(stage, "CPU per event", "µs", 1e6/perCPUSecond)
}

// millis reads a Go duration as printed by time.Duration.String in
// milliseconds (NaN when it is not one).
func millis(s string) float64 {
	d, err := time.ParseDuration(s)
	if err != nil {
		return math.NaN()
	}
	return float64(d) / float64(time.Millisecond)
}

var relayLatency = regexp.MustCompile(`^latency: \d+/\d+ events seen, achieved \d+ events/s .*: p50 (\S+)\s+p99 (\S+)\s+max (\S+)`)

func relayMeasures(out string) []Measure {
	var got []Measure
	raw := 0.0
	for _, l := range lines(out) {
		if m := relayRaw.FindStringSubmatch(l); m != nil {
			raw = max(raw, num(m[1])) // the better of the scans around the relay, as make bench's page takes it
		} else if m := relayRelay.FindStringSubmatch(l); m != nil {
			got = append(got, throughput("relay", "events/s", num(m[1])))
		} else if m := relayLatency.FindStringSubmatch(l); m != nil {
			got = append(got, lower("relay", "commit → Kafka p50", "ms", millis(m[1])), lower("relay", "commit → Kafka p99", "ms", millis(m[2])))
		}
	}
	if raw > 0 {
		got = append(got, throughput("relay raw scan+produce (ref.)", "events/s", raw))
	}
	return got
}

var procRoundCPU = regexp.MustCompile(`^round \d+\s+(raw|room)\s+\d+ events in\s+\S+:\s+(\d+) events/s wall,\s+(\d+) events per CPU-second`)

func processorsMeasures(out string) []Measure {
	var got []Measure
	for _, l := range lines(out) {
		if m := procRoundCPU.FindStringSubmatch(l); m != nil {
			stage := map[string]string{"room": "room proc.", "raw": "room proc. raw copy (ref.)"}[m[1]]
			got = append(got, throughput(stage, "events/s", num(m[2])), cpuPerEvent(stage, num(m[3])))
		}
	}
	return got
}

var (
	micRun     = regexp.MustCompile(`^  (raw|mic|rawx|rawo)\s+(\d+) events/s wall\s+(\d+) events per CPU-second`)
	micOpening = regexp.MustCompile(`^  opening:\s+(\d+) events/s wall,\s+(\d+) per CPU-second`)
	micHeap    = regexp.MustCompile(`^  heap per open session (while processing|after restore)\b.*?: (\d+) bytes`)
	micRestore = regexp.MustCompile(`^  restore: \d+ keys .* in ([\d.]+) s`)
)

func micMeasures(out string) []Measure {
	var got []Measure
	totals := false
	for _, l := range lines(out) {
		switch {
		case strings.HasPrefix(l, " total of "):
			totals = true // the sums of the rounds before, not a round
		case strings.HasPrefix(l, "memory and restore"):
			totals = false
		}
		if m := micRun.FindStringSubmatch(l); m != nil && !totals {
			stage := "mic proc."
			if m[1] != "mic" {
				stage = "mic " + m[1] + " copy (ref.)"
			}
			got = append(got, throughput(stage, "events/s", num(m[2])), cpuPerEvent(stage, num(m[3])))
		} else if m := micOpening.FindStringSubmatch(l); m != nil {
			got = append(got, throughput("mic opening sessions", "events/s", num(m[1])), cpuPerEvent("mic opening sessions", num(m[2])))
		} else if m := micHeap.FindStringSubmatch(l); m != nil {
			got = append(got, lower("mic open session state", "heap "+m[1], "bytes", num(m[2])))
		} else if m := micRestore.FindStringSubmatch(l); m != nil {
			got = append(got, lower("mic restore", "time", "s", num(m[1])))
		}
	}
	return got
}

var (
	sinkRun   = regexp.MustCompile(`^\s+round \d+ (raw|store|sink)\s+(\d+) entries/s`)
	sinkNaive = regexp.MustCompile(`^\s+naive\s+(\d+) entries/s`)
)

func sinkMeasures(out string) []Measure {
	var got []Measure
	for _, l := range lines(out) {
		if m := sinkRun.FindStringSubmatch(l); m != nil {
			stage := map[string]string{"sink": "sink", "store": "sink store only", "raw": "sink raw upserts (ref.)"}[m[1]]
			got = append(got, throughput(stage, "entries/s", num(m[2])))
		} else if m := sinkNaive.FindStringSubmatch(l); m != nil {
			got = append(got, throughput("sink naive (ref.)", "entries/s", num(m[1])))
		}
	}
	return got
}

var (
	imLatency = regexp.MustCompile(`^publish-to-delivered .*: p50 (\S+) p90 (\S+) p99 (\S+) max `)
	imDrain   = regexp.MustCompile(`^generated \d+ events in \S+; all delivered (\S+) after load end`)
)

func imMeasures(out string) []Measure {
	var got []Measure
	offered, limit := 0.0, 0.0
	for _, l := range lines(out) {
		if m := imOffered.FindStringSubmatch(l); m != nil {
			offered, limit = num(m[1]), num(m[2])
		} else if m := imAccepted.FindStringSubmatch(l); m != nil && limit > 0 && offered > limit {
			got = append(got, throughput("IM, saturated", "calls/s", num(m[1])))
		} else if m := imLatency.FindStringSubmatch(l); m != nil {
			for i, p := range []string{"p50", "p90", "p99"} {
				got = append(got, lower("IM", "publish → delivered "+p, "ms", millis(m[i+1])))
			}
		} else if m := imDrain.FindStringSubmatch(l); m != nil {
			got = append(got, lower("IM", "drain after load", "ms", millis(m[1])))
		}
	}
	return got
}

var luckyRun = regexp.MustCompile(`^\s+round \d+ (\w+)\s+(\S.*?)\s{2,}(\d+) draws/s\s+p50 (\S+)\s+p99 (\S+)\s+p999 (\S+)\s+([\d.]+) stmts/draw`)

func luckyMeasures(out string) []Measure {
	var got []Measure
	for _, l := range lines(out) {
		m := luckyRun.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		stage := "lucky " + m[1] + " " + m[2]
		if strings.HasPrefix(m[2], "baseline") {
			stage += " (ref.)"
		}
		got = append(got, throughput(stage, "draws/s", num(m[3])),
			lower(stage, "latency p50", "ms", millis(m[4])), lower(stage, "latency p99", "ms", millis(m[5])),
			lower(stage, "latency p999", "ms", millis(m[6])), lower(stage, "statements per draw", "", num(m[7])))
	}
	return got
}
