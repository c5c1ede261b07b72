#!/usr/bin/env bash
# make bench: every benchmark of roomflow, each side by side with the limit
# it is compared to, in one run. Not part of `make test`.
#
#   ./benchmarks/run.sh            # all, full size
#   QUICK=1 ./benchmarks/run.sh    # smaller inputs, for a smoke run
#
# Needs MariaDB on 127.0.0.1:3306 (ROOMFLOW_TEST_MYSQL_DSN); Kafka is an
# in-process kfake unless a benchmark is given -brokers or -kafka-config.
set -euo pipefail
cd "$(dirname "$0")/.."
out=benchmarks/results
mkdir -p "$out"
stamp=$(date -u +%Y%m%dT%H%M%SZ)

run() {
  local name=$1; shift
  echo "== $name: go run ./benchmarks/$name $*"
  go run "./benchmarks/$name" "$@" 2>&1 | tee -a "$out/$name-$stamp.txt" # -a: a benchmark run twice (im, e2e) keeps both
}

if [ "${QUICK:-}" = 1 ]; then
  run relay -rows 100000
  run processors -events 200000
  run mic -events 200000 -open 200000
  run sink -entries 50000
  run im -rate 150 -duration 10s
  run failover -n 2 -scenarios relay,run
  run lucky -quick
  run e2e -quick -rates 5000 -configs tuned -sustain "" -out "$out/e2e-$stamp"
else
  run relay
  run processors
  run mic
  run sink
  run im -rate 150 -duration 20s          # below the app limit: latency
  run im -rate 400 -duration 20s -hot 5   # saturation: 200 calls/s, 40/s per group
  run failover                            # kill -9 takeover times, static members
  run lucky                               # draw service vs wallet-in-locks baseline; 1,000/s latency
  run e2e -repeat 3 -duration 10s -out "$out/e2e-$stamp"  # whole fact path: latency at 1k/5k/10k (default, tuned; spread of 3), sustained rate
  run e2e -scaleout -out "$out/e2e-$stamp" # replicas joining and leaving: pauses, recovery, facts vs the oracle
fi

# One Markdown page of the run: every benchmark's output (each prints its
# limit from the same run) and the end-to-end report with its charts.
md="$out/$(date -u +%Y-%m-%d).md"
{
  echo "# make bench $stamp${QUICK:+ (QUICK)}"
  echo
  echo "Machine: $(nproc) CPUs, $(uname -srm), $(go version | cut -d' ' -f3). Other work on the machine changes the figures: compare within this page."
  for f in "$out"/*-"$stamp".txt; do
    echo
    echo "## $(basename "$f" "-$stamp.txt")"
    echo
    echo '```'
    cat "$f"
    echo '```'
  done
  if [ -f "$out/e2e-$stamp/report.md" ]; then
    echo
    sed -e 's/^#/##/' -e "s#](e2e-#](e2e-$stamp/e2e-#g" "$out/e2e-$stamp/report.md"
  fi
} > "$md"
echo "== report: $md"
