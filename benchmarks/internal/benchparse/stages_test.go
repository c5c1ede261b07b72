package benchparse

import (
	"fmt"
	"testing"
)

// Outputs in the benchmarks' own formats (their Printf lines), repeated
// the way make bench appends them.
func TestStages(t *testing.T) {
	for _, tc := range []struct {
		bench, out string
		want       string // fmt of the stages
	}{
		{"relay", `filled in 3.2s (300000 rows/s)
raw   : 1000000 events in 3.7s = 270000 events/s (scan + non-transactional produce)
relay : 1000000 events in 3.4s = 293000 events/s (transactional, position per batch; leader after 1s, not counted)
raw   : 1000000 events in 3.8s = 265000 events/s (scan + non-transactional produce)
ratio : relay/raw = 108.5% of the better raw run (target >= 70%, and >= 50000 events/s)
raw   : 100000 events in 1s = 100000 events/s (scan + non-transactional produce)
relay : 100000 events in 1s = 90000 events/s (transactional, position per batch; leader after 1s, not counted)
raw   : 100000 events in 1s = 110000 events/s (scan + non-transactional produce)
ratio : relay/raw = 81.8% of the better raw run (target >= 70%, and >= 50000 events/s)
`, "[{relay events/s raw scan + produce [{293000 270000} {90000 110000}] }]"},
		{"processors", `round 1  raw    500000 events in   1.000s:    500000 events/s wall,    600000 events per CPU-second (cpu 0.83s)
round 1  room   500000 events in   2.000s:    250000 events/s wall,    300000 events per CPU-second (cpu 1.67s)  room/raw 0.50 (wall), 0.50 (per CPU-second)
round 2  raw    500000 events in   1.000s:    400000 events/s wall,    600000 events per CPU-second (cpu 0.83s)
round 2  room   500000 events in   2.000s:    300000 events/s wall,    300000 events per CPU-second (cpu 1.67s)  room/raw 0.75 (wall), 0.50 (per CPU-second)
total    raw   1000000 events in   2.000s:    450000 events/s wall,    600000 events per CPU-second (cpu 1.67s)
total    room  1000000 events in   4.000s:    275000 events/s wall,    300000 events per CPU-second (cpu 3.33s)
`, "[{room proc. events/s raw transactional copy [{250000 500000} {300000 400000}] }]"},
		{"mic", `mic processor benchmark: GOMAXPROCS=2, NumCPU=2, partitions=6, commit 1000 records / 100ms, brokers kfake

throughput: 300000 input events pre-filled
 round 1
  raw      700000 events/s wall     900000 events per CPU-second  (0.3 CPU-s, 0.4 s wall, 300000 records out)
  mic      200000 events/s wall     180000 events per CPU-second  (1.7 CPU-s, 1.5 s wall, 798000 records out)
  rawx     450000 events/s wall     460000 events per CPU-second  (0.7 CPU-s, 0.7 s wall, 798000 records out)
  mic/raw:  0.29 (wall), 0.20 (per CPU-second)
 round 2
  raw      700000 events/s wall     900000 events per CPU-second  (0.3 CPU-s, 0.4 s wall, 300000 records out)
  mic      220000 events/s wall     180000 events per CPU-second  (1.7 CPU-s, 1.5 s wall, 798000 records out)
  rawx     440000 events/s wall     460000 events per CPU-second  (0.7 CPU-s, 0.7 s wall, 798000 records out)
 total of 2 rounds
  raw      700000 events/s wall     900000 events per CPU-second  (0.6 CPU-s, 0.8 s wall, 600000 records out)
  mic      210000 events/s wall     180000 events per CPU-second  (3.4 CPU-s, 3.0 s wall, 1596000 records out)
  rawx     445000 events/s wall     460000 events per CPU-second  (1.4 CPU-s, 1.4 s wall, 1596000 records out)
`, "[{mic proc. events/s raw copy, equal output [{200000 450000} {220000 440000}] }]"},
		{"sink", `  round 1 raw        31500 entries/s (200000 in 6.349s)
  round 1 store      33000 entries/s (200000 in 6.06s)
  round 1 sink       30000 entries/s (200000 in 6.666s)
  round 2 raw        30000 entries/s (200000 in 6.666s)
  round 2 store      33000 entries/s (200000 in 6.06s)
  round 2 sink       29000 entries/s (200000 in 6.896s)
  naive         1150 entries/s (5000 in 4.347s)
`, "[{sink entries/s raw batched upserts [{30000 31500} {29000 30000}] }]"},
		{"im", `offered 150 events/s (150 over 2000 rooms + 0 hot rooms x 80/s) for 20s; limits: 200 calls/s per app, 40 msgs/s per group
accepted calls/s during load: mean 150.2, min 140, max 160  (limit 200: mean/limit 0.751)
offered 800 events/s (400 over 2000 rooms + 5 hot rooms x 80/s) for 20s; limits: 200 calls/s per app, 40 msgs/s per group
accepted calls/s during load: mean 193.4, min 180, max 200  (limit 200: mean/limit 0.967)
`, "[{IM, saturated calls/s Tencent app limit [{193.4 200}] }]"},
		{"lucky", `  round 1 hot    service                       1543 draws/s  p50 38ms     p99 60ms     p999 80ms       1.2 stmts/draw  hits 10.0% (granted 5)
  round 1 hot    service MaxBatch=1             246 draws/s  p50 38ms     p99 60ms     p999 80ms       1.2 stmts/draw  hits 10.0% (granted 5)
  round 1 hot    baseline (wallet in locks)     167 draws/s  p50 38ms     p99 60ms     p999 80ms       1.2 stmts/draw  hits 10.0% (granted 5)
  round 1 rooms  service                       1638 draws/s  p50 38ms     p99 60ms     p999 80ms       1.2 stmts/draw  hits 10.0% (granted 5)
  round 1 hot    service at 1000/s offered      999 draws/s  p50 13ms     p99 37ms     p999 50ms       1.2 stmts/draw  (offered 1000/s)
  round 2 hot    service                       1942 draws/s  p50 38ms     p99 60ms     p999 80ms       1.2 stmts/draw  hits 10.0% (granted 5)
`, "[{lucky hot path draws/s target 2,000 [{1543 2000} {1942 2000}] }]"},
		{"e2e", `roomflow end to end: vm, GOMAXPROCS 2, NumCPU 2 (shared machine), kfake 3 brokers in a child process, 6 partitions, layouts processes, run

raw MySQL limit (same server, plain multi-row statements): 40000 events/s of the mix: 200000 room_outbox rows in 4.0s (50000/s) while the ledger rows of its 120000 mic events went in over 5.0s (24000 entries/s)

processes, sustained-rate probe 10000 events/s (achieved 9990 over 60.0s, 0.25 of the raw limit): sustained
  CPU: relay 1 CPU-s
processes, sustained-rate probe 15000 events/s (achieved 14000 over 60.0s, 0.35 of the raw limit): NOT sustained: sink lag 3.0s of traffic at the end (> 2s)
run, sustained-rate probe 10000 events/s (achieved 9980 over 60.0s, 0.25 of the raw limit): sustained
roomflow end to end: vm, GOMAXPROCS 2
processes, sustained-rate probe 10000 events/s (achieved 9000 over 60.0s): sustained
roomflow end to end: vm, GOMAXPROCS 2
raw MySQL limit (same server, plain multi-row statements): 14000 events/s of the mix: 100000 room_outbox rows in 4.0s (25000/s) while the ledger rows of its 60000 mic events went in over 7.0s (8600 entries/s)
slow, sustained-rate probe 5000 events/s (achieved 5001 over 40.0s, 0.36 of the raw limit): NOT sustained: sink lag 2.8s of traffic at the end (> 2s)
slow, sustained-rate probe 4000 events/s (achieved 4000 over 40.0s, 0.29 of the raw limit): NOT sustained: sink lag grew from 0.2s to 0.8s of traffic over the last 30s
`, "[{e2e processes events/s raw MySQL limit [{9990 40000}] } {e2e run events/s raw MySQL limit [{9980 40000}] } {e2e slow events/s raw MySQL limit [] none of the rates tried sustained, the lowest 4000}]"},
		{"e2e", "roomflow end to end: quick\n\nprocesses, default config, 5000 events/s asked\n", "[{e2e sustained events/s raw MySQL limit [] }]"},
	} {
		t.Run(tc.bench, func(t *testing.T) {
			if got := fmt.Sprint(stageParsers[tc.bench](tc.out)); got != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}
