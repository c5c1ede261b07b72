package live_test

import (
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/obs"
	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/producers/loadgen/live"
)

// TestRunWithRealSources: the relay's metrics endpoint and kfake's group
// lag together; when the endpoint goes away mid-run its value turns n/a,
// the Kafka values go on, and the report charts what was known.
func TestRunWithRealSources(t *testing.T) {
	k := testenv.NewKafka(t, testenv.Partitions(1))
	ctx := t.Context()
	cl := k.Client(t)
	var recs []*kgo.Record
	for range 30 {
		recs = append(recs, &kgo.Record{Topic: k.Config.Topics.RoomEvents, Value: []byte("e")})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	adm := k.Admin(t)
	var o kadm.Offsets
	o.Add(kadm.Offset{Topic: k.Config.Topics.RoomEvents, Partition: 0, At: 20, LeaderEpoch: -1})
	if _, err := adm.CommitOffsets(ctx, "mic", o); err != nil {
		t.Fatal(err)
	}
	relay := httptest.NewServer(obs.Handler(relayRegistry(0.3, 0), obs.NewHealth()))
	defer relay.Close()

	dlq := live.NewDLQCounter(k.Client(t, live.DLQConsumeOpts(time.Now(), k.Config.Topics.DLQ)...))
	defer dlq.Close()
	var c live.Counter
	c.SetRate(100)
	var out testenv.SyncBuffer
	p := live.Start(ctx, live.Options{Counter: &c, Interval: 200 * time.Millisecond, Out: &out, Terminal: func(io.Writer) bool { return false },
		Sources: []live.LagSource{
			live.MetricsSource{URLs: []string{relay.URL + "/metrics"}},
			live.KafkaSource{Admin: adm, ProcessorGroups: []string{"mic"}},
			dlq,
		}})
	ticks := func() int { return strings.Count(out.String(), "loadgen progress") }
	testenv.Eventually(t, 10*time.Second, "ticks with the relay up", func() bool { c.Add(5); return ticks() >= 3 })
	relay.Close()
	n := ticks()
	testenv.Eventually(t, 10*time.Second, "ticks with the relay down", func() bool { c.Add(5); return ticks() >= n+3 })
	rec := p.Stop()

	// A loaded machine may time a source out on some tick: look for the
	// values, not at fixed lines.
	text := out.String()
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if !strings.Contains(text, "relay_lag=0.30s processor_lag=10 sink_lag=n/a dlq=0") ||
		!strings.Contains(lines[len(lines)-1], "relay_lag=n/a processor_lag=10 sink_lag=n/a dlq=0") {
		t.Fatalf("no tick with both sources, or the last tick not without the relay:\n%s", text)
	}
	if rec.SourceFailures[0] < 3 || len(rec.Processor.Points()) == 0 || len(rec.Relay.Points()) == 0 || len(rec.Relay.Points()) >= rec.Ticks {
		t.Fatalf("failures %v of %d ticks, relay %d points, processor %d", rec.SourceFailures, rec.Ticks, len(rec.Relay.Points()), len(rec.Processor.Points()))
	}

	path := filepath.Join(t.TempDir(), "run.md")
	if err := live.WriteReport(path, live.Summary{Recording: rec, SourceNames: []string{"metrics", "kafka"}}); err != nil {
		t.Fatal(err)
	}
	md, _ := os.ReadFile(path)
	if !strings.Contains(string(md), "Lag metrics failed") || !strings.Contains(string(md), "![lag over time](run-lag.svg)") {
		t.Fatalf("report:\n%s", md)
	}
	if n, texts := svgTexts(t, filepath.Join(filepath.Dir(path), "run-lag.svg")); n["polyline"] != 3 || !strings.Contains(texts, "relay lag") {
		t.Fatalf("lag chart: %v %s", n, texts)
	}
}
