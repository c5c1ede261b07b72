package micproc_test

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/schemareg"
	"github.com/hyapp/roomflow/processors/mic"
	"github.com/hyapp/roomflow/processors/mic/micproc"
	"github.com/hyapp/roomflow/processors/mic/mictest"
	"github.com/hyapp/roomflow/processors/streams"
)

// BenchmarkProcess is the processor's per-event CPU without Kafka: the
// input mix of benchmarks/mic (UUID event ids, 50,000 users) over 6
// partitions, each a streams.Local committing every 5,000 records, so the
// store, the arena and the changelog encoding are the runtime's.
//
// totals=on runs it with every partition's totals bootstrapped (the marker
// in each store), so every close also updates and publishes the user's
// totals: the cost of mic.totals_enabled, without Kafka's share.
func BenchmarkProcess(b *testing.B) {
	for _, totals := range []bool{false, true} {
		b.Run(fmt.Sprintf("totals=%s", map[bool]string{false: "off", true: "on"}[totals]), func(b *testing.B) {
			benchProcess(b, totals, schemareg.Frames{})
		})
	}
}

// BenchmarkProcessConfluent is BenchmarkProcess (totals off) writing the
// public topics in the Confluent wire format (kafka.public_wire_format
// confluent).
func BenchmarkProcessConfluent(b *testing.B) {
	benchProcess(b, false, schemareg.ConfluentFrames(map[string]int{"hyapp.user.mic-session-closed.v1": 1,
		"hyapp.user.mic-daily-stats.v1": 1, "hyapp.user.mic-lifetime-stats.v1": 1,
		"hyapp.user.mic-daily-totals.v1": 1, "hyapp.user.mic-lifetime-totals.v1": 1}))
}

func benchProcess(b *testing.B, totals bool, frames schemareg.Frames) {
	const events, partitions, commitEvery = 300_000, 6, 5000
	r := rand.New(rand.NewPCG(1, 2))
	start := time.Now().Add(-48 * time.Hour).UnixMilli()
	st := mictest.Generate(r, mictest.Gen{AppCode: "hyapp", Users: 50_000, Sessions: events * 10 / 37, StartMs: start,
		SpreadMs: 36 * 3600 * 1000, MaxLen: 3 * time.Hour, DupRate: 0.01, OpenRate: 0.02})
	part := kgo.StickyKeyPartitioner(nil).ForTopic("in")
	recs := make([]*kgo.Record, len(st.Events))
	for i := range st.Events {
		ev := &st.Events[i]
		ev.EventID = fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", r.Uint32(), r.Uint32()&0xffff, r.Uint32()&0xffff,
			r.Uint32()&0xffff, r.Uint64()&0xffffffffffff)
		recs[i] = &kgo.Record{Topic: "in", Key: []byte(strconv.FormatInt(ev.UserID, 10)), Value: ev.Encode()}
		recs[i].Partition = int32(part.Partition(recs[i], partitions))
	}
	// The runtime processes a fetch partition by partition: so does each
	// commit window here.
	for w := 0; w < len(recs); w += commitEvery {
		slices.SortStableFunc(recs[w:min(w+commitEvery, len(recs))], func(a, b *kgo.Record) int {
			return cmp.Compare(a.Partition, b.Partition)
		})
	}
	cfg := testConfig(b, nil)
	cfg.Topics.Frames = frames
	cfg.Runtime.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	proc, err := micproc.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	var tasks []*streams.Local
	emitted := 0
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		j := i % len(recs)
		if j == 0 { // a new processor's empty state, as each benchmarks/mic round
			b.StopTimer()
			tasks = tasks[:0]
			for p := range partitions {
				l := streams.NewLocal(context.Background(), "in", int32(p), true, nil, cfg.Runtime.Logger)
				if totals {
					l.Task().Store().Put(mic.KeyTotalsBootstrap, mic.EncodeBootstrapMarker(0))
					l.Commit()
				}
				tasks = append(tasks, l)
			}
			b.StartTimer()
		}
		out, err := tasks[recs[j].Partition].Process(proc, recs[j])
		if err != nil {
			b.Fatal(err)
		}
		emitted += len(out)
		if (j+1)%commitEvery == 0 || j+1 == len(recs) {
			for _, t := range tasks {
				emitted += len(t.Commit())
			}
		}
	}
	// CPU time, GC included, is steadier than ns/op on a shared machine.
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(emitted)/float64(b.N), "records/op")
}

// cpuTime is the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkScanWithTotals is the timer's scan (Prune: compensation off, so
// nothing closes) of a partition of 100,000 open sessions, alone and with
// 100,000 users' totals beside them: the totals keys are told apart by
// their first byte and never decoded, so they add only the map walk.
func BenchmarkScanWithTotals(b *testing.B) {
	const n = 100_000
	for _, withTotals := range []bool{false, true} {
		b.Run(fmt.Sprintf("totals=%v", withTotals), func(b *testing.B) {
			cfg := testConfig(b, nil)
			cfg.Runtime.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
			cfg.Settings.DisableCompensation = true
			proc, err := micproc.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			now := time.Now()
			l := streams.NewLocal(context.Background(), "in", 0, true, func() time.Time { return now }, cfg.Runtime.Logger)
			for i := range n {
				ev := mic.Event{EventID: fmt.Sprintf("e-%d", i), EventType: mic.EventTypeRoomMicChanged, AppCode: "hyapp", RoomID: "r",
					OccurredAtMs: now.UnixMilli(), UserID: int64(1 + i), Action: mic.ActionUp, MicSessionID: fmt.Sprintf("ms-%d", i)}
				if _, err := l.Process(proc, &kgo.Record{Topic: "in", Value: ev.Encode()}); err != nil {
					b.Fatal(err)
				}
				if withTotals {
					t := mic.Totals{SeatOccupiedMs: 3_600_000, SessionCount: 3, FirstMicAtMs: now.UnixMilli(), LastMicAtMs: now.UnixMilli()}
					l.Task().Store().Put(mic.TotalsKey("hyapp", int64(1+i)), t.AppendBinary(nil))
				}
			}
			l.Commit()
			b.ResetTimer()
			for range b.N {
				if _, _, err := l.Punctuate(proc.Prune, now); err != nil {
					b.Fatal(err)
				}
				l.Commit()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/session")
		})
	}
}
