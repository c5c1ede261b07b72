package benchparse

import (
	"fmt"
	"math"
	"os"
	"testing"
)

// testdata/<bench>.txt are real outputs of one small run of each
// benchmark (make bench-compare's slot: one round). Each figure below is
// read off the line the benchmark printed.
func TestMeasures(t *testing.T) {
	for _, tc := range []struct {
		bench string
		n     int      // figures in the output
		want  []string // some of them: stage | name | value unit
	}{
		{"relay", 4, []string{
			"relay | throughput | 164479 events/s",
			"relay | commit → Kafka p99 | 103.4 ms",
			"relay raw scan+produce (ref.) | throughput | 169189 events/s", // the better of the two raw scans
		}},
		{"processors", 4, []string{
			"room proc. | throughput | 465080 events/s",
			"room proc. | CPU per event | 2.71504 µs", // 1e6 / 368319 events per CPU-second
			"room proc. raw copy (ref.) | throughput | 546616 events/s",
		}},
		{"mic", 13, []string{
			"mic proc. | throughput | 116707 events/s",
			"mic proc. | CPU per event | 8.63946 µs",
			"mic rawx copy (ref.) | throughput | 172094 events/s",
			"mic restore | time | 0.16 s",
			"mic open session state | heap after restore | 330 bytes",
		}},
		{"sink", 4, []string{
			"sink | throughput | 15830 entries/s",
			"sink store only | throughput | 10918 entries/s",
			"sink naive (ref.) | throughput | 772 entries/s",
		}},
		{"im", 5, []string{
			"IM, saturated | throughput | 200 calls/s", // offered 250/s above the 200 calls/s limit
			"IM | publish → delivered p99 | 1158.5 ms", // 1.1585s
			"IM | drain after load | 1007 ms",
		}},
		{"lucky", 30, []string{
			"lucky hot service | throughput | 1665 draws/s",
			"lucky hot service | latency p999 | 87.5 ms",
			"lucky spread service MaxBatch=1 | statements per draw | 15.2 ",
			"lucky hot baseline (wallet in locks) (ref.) | latency p99 | 564.6 ms",
		}},
	} {
		t.Run(tc.bench, func(t *testing.T) {
			raw, err := os.ReadFile("testdata/" + tc.bench + ".txt")
			if err != nil {
				t.Fatal(err)
			}
			ms, ok := Measures(tc.bench, string(raw))
			if !ok {
				t.Fatalf("Measures does not know %s", tc.bench)
			}
			if len(ms) != tc.n {
				t.Errorf("%d figures, want %d: %v", len(ms), tc.n, ms)
			}
			got := map[string]bool{}
			for _, m := range ms {
				if math.IsNaN(m.Value) || m.Value <= 0 {
					t.Errorf("%s %s: value %v", m.Stage, m.Name, m.Value)
				}
				if want := m.Name != "throughput"; m.LowerIsBetter != want {
					t.Errorf("%s %s: LowerIsBetter %v", m.Stage, m.Name, m.LowerIsBetter)
				}
				got[fmt.Sprintf("%s | %s | %.6g %s", m.Stage, m.Name, m.Value, m.Unit)] = true
			}
			for _, w := range tc.want {
				if !got[w] {
					t.Errorf("no %q in %v", w, got)
				}
			}
		})
	}
	if _, ok := Measures("e2e-nope", ""); ok {
		t.Error("Measures knows a benchmark that does not exist")
	}
}
