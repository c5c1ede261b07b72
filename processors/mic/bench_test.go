package mic_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/hyapp/roomflow/processors/mic"
	"github.com/hyapp/roomflow/processors/mic/mictest"
)

// BenchmarkDecodeHandleEncode is the domain's share of the processor's
// per-event cost: decode the record, apply it on a MapState, encode every
// output. (The processor's throughput against Kafka is in benchmarks/mic.)
func BenchmarkDecodeHandleEncode(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	st := mictest.Generate(r, mictest.Gen{Users: 5000, Sessions: 30000, StartMs: t0, SpreadMs: 24 * hour,
		MaxLen: 2 * time.Hour, DupRate: 0.01})
	values := make([][]byte, len(st.Events))
	for i := range st.Events {
		values[i] = st.Events[i].Encode()
	}
	b.ReportAllocs()
	b.ResetTimer()
	var state *mic.MapState
	var sc mic.Scratch // as the processor does
	buf := make([]byte, 0, 1024)
	for i := 0; i < b.N; i++ {
		j := i % len(values)
		if j == 0 {
			b.StopTimer()
			state = mic.NewMapState()
			b.StartTimer()
		}
		ev, err := mic.Decode(values[j], "")
		if err != nil {
			b.Fatal(err)
		}
		out := sc.Handle(state, &ev)
		if out.Ledger != nil {
			buf = mic.AppendLedger(buf[:0], &out)
		}
		if out.Closed != nil {
			buf = mic.AppendSessionClosed(buf[:0], out.Closed)
			for _, d := range out.Daily {
				buf = mic.AppendDailyStatsUpdated(buf[:0], d)
			}
			buf = mic.AppendLifetimeStatsUpdated(buf[:0], out.Lifetime)
		}
	}
}
