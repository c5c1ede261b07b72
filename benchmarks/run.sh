#!/usr/bin/env bash
# make bench: every benchmark of roomflow, each side by side with the limit
# it is compared to, in one run, each measured 3 times (a benchmark's own
# -rounds/-repeat/-n where it has one, else run here 3 times) so the page
# gives min/median/max. Not part of `make test`.
#
#   ./benchmarks/run.sh            # all, full size (budget: 30 min on 2 cores)
#   QUICK=1 ./benchmarks/run.sh    # smaller inputs, for a smoke run (budget: 3 min)
#   PUBLISH=1 ./benchmarks/run.sh  # also copy the charts docs/performance.md shows to docs/performance/
#
# Needs MariaDB on 127.0.0.1:3306 (ROOMFLOW_TEST_MYSQL_DSN) and the
# mariadb-server binaries (the sink and e2e start a throwaway mariadbd);
# Kafka is an in-process kfake unless a benchmark is given -brokers or
# -kafka-config.
set -euo pipefail
cd "$(dirname "$0")/.."
out=benchmarks/results
mkdir -p "$out"
stamp=$(date -u +%Y%m%dT%H%M%SZ)
times="$out/times-$stamp.tsv"
load0=$(cut -d' ' -f1-3 /proc/loadavg)

run() {
  local name=$1; shift
  echo "== $name: go run ./benchmarks/$name $*"
  local t0=$SECONDS
  go run "./benchmarks/$name" "$@" 2>&1 | tee -a "$out/$name-$stamp.txt" # -a: repetitions of a benchmark keep every output
  printf '%s\t%s\t%d\n' "$name" "$*" $((SECONDS - t0)) >> "$times"
}

# run3: a benchmark without a repetition flag of its own, 3 times.
run3() {
  for _ in 1 2 3; do run "$@"; done
}

e2e_out="$out/e2e-$stamp"
# One roomflow binary for the benchmarks that run it as child processes.
bin="$out/roomflow-$stamp"
go build -o "$bin" ./cmd/roomflow
trap 'rm -f "$bin"' EXIT
if [ "${QUICK:-}" = 1 ]; then
  run3 relay -rows 50000 -rate 0
  run processors -events 100000 -rounds 3
  run mic -events 50000 -open 50000 -rounds 3
  run sink -entries 10000 -naive 300 -rounds 3 -private=false  # the local server: no mariadb-install-db
  run3 im -rate 250 -duration 4s             # just above the app limit: a short drain
  run failover -n 3 -scenarios relay -bin "$bin"
  run lucky -quick -rounds 3 -draws 1000 -naive-draws 100 -rate 0   # no fixed-rate run: throughput only
  run e2e -bin "$bin" -mariadb tuned -layouts processes,run -rates 5000 -configs tuned -duration 6s -sustain "" -out "$e2e_out"
else
  run3 relay -rows 500000 -latency-duration 10s
  run processors -rounds 3
  run mic -rounds 3
  run sink -entries 100000                   # -rounds 3 is its default
  run3 im -rate 150 -duration 15s            # below the app limit: latency
  run3 im -rate 400 -duration 10s -hot 5     # saturation: 200 calls/s, 40/s per group (then a 30 s drain)
  run failover -n 3 -bin "$bin"              # kill -9 takeover times, static members: min/median/max of 3 kills
  run lucky -draws 6000 -naive-draws 800 -rate-duration 8s # -rounds 3 is its default: draw service vs wallet-in-locks baseline; 1,000/s latency
  # The whole fact path on a MariaDB tuned for throughput, each component
  # its own process and all in one `roomflow run`: latency at 1k/5k/10k
  # (default and tuned config, 3 runs each; `roomflow run` at 5k), the raw
  # MySQL limit, and the highest sustained rate of each layout.
  run e2e -bin "$bin" -mariadb tuned -layouts processes,run -run-rates 5000 -repeat 3 -duration 10s -sustain 4000,8000,12000,16000,18000,20000,25000 -sustain-duration 40s -out "$e2e_out"
  run e2e -bin "$bin" -scaleout -out "$e2e_out" # replicas joining and leaving: pauses, recovery, facts vs the oracle (one run: a scenario, not a rate)
fi

# One Markdown page of the run: the machine, the stage summary (spread of
# the 3 runs, share of each stage's reference, bar chart), the end-to-end
# report with its charts, every benchmark's output, and how long each took.
md="$out/$(date -u +%Y-%m-%d).md"
{
  echo "# make bench $stamp${QUICK:+ (QUICK)}"
  echo
  echo "Machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))," \
    "$(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -srm), $(go version | cut -d' ' -f3)," \
    "MariaDB $(mariadb --version 2>/dev/null | grep -o '[0-9]*\.[0-9]*\.[0-9]*-MariaDB' || echo '?')." \
    "Load average at the start $load0, at the end $(cut -d' ' -f1-3 /proc/loadavg)." \
    "Other work on the machine changes the figures: compare within this page."
  echo
  echo "## Stages"
  echo
  go run ./benchmarks/summary -dir "$out" -stamp "$stamp" -svg "$out/stages-$stamp.svg"
  if [ -f "$e2e_out/report.md" ]; then
    echo
    sed -e 's/^#/##/' -e "s#](e2e-#](e2e-$stamp/e2e-#g" "$e2e_out/report.md"
  fi
  echo
  echo "## Time per benchmark"
  echo
  echo "| benchmark | arguments | seconds |"
  echo "| --- | --- | --- |"
  awk -F'\t' '{printf "| %s | `%s` | %s |\n", $1, $2, $3; t += $3} END {printf "| total | | %d |\n", t}' "$times"
  for f in "$out"/*-"$stamp".txt; do
    echo
    echo "## $(basename "$f" "-$stamp.txt") output"
    echo
    echo '```'
    cat "$f"
    echo '```'
  done
} > "$md"
if [ "${PUBLISH:-}" = 1 ]; then
  if [ -f "$out/stages-$stamp.svg" ]; then cp "$out/stages-$stamp.svg" docs/performance/stages.svg; fi
  if [ -d "$e2e_out" ]; then cp "$e2e_out"/*.svg docs/performance/; fi
  echo "== charts copied to docs/performance/"
fi
echo "== report: $md"
