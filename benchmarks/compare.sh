#!/usr/bin/env bash
# make bench-compare: the stage benchmarks of two builds, or of one build in
# two modes, run interleaved (A B A B …) on this machine and MariaDB server,
# side by side with the ratio B/A (benchmarks/compare prints the table).
#
#   BASE=HEAD~1 ./benchmarks/compare.sh            # that commit (A) against the working tree (B)
#   A_ARGS=-dispatch=false B_ARGS=-dispatch=true BENCH=lucky ./benchmarks/compare.sh
#
# BASE       a git ref; built from a git worktree that is removed afterwards.
#            Empty: both sides are the working tree and A_ARGS/B_ARGS differ.
# BENCH      comma-separated: relay,processors,mic,sink,im,lucky (default all).
# ROUNDS     rounds per side, at least 2 (default: what fits 15 minutes).
# ARGS       flags for both sides (after each benchmark's comparison profile).
# A_ARGS, B_ARGS  flags for one side, passed to the benchmarks that take them.
# OUT        directory of the report (default benchmarks/results/compare-<stamp>).
#
# Exit status: 2 bad input (not a ref, unknown benchmark, bad ROUNDS,
# MariaDB down, a flag no benchmark takes), 1 a side that does not build
# or nothing compared. Nothing is left behind: the worktree and the
# binaries go on every exit.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
stamp=$(date -u +%Y%m%dT%H%M%SZ)
out=${OUT:-benchmarks/results/compare-$stamp}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/roomflow-bench-compare.XXXXXX")
wt=""
cleanup() {
  if [ -n "$wt" ]; then git worktree remove --force "$wt" >/dev/null 2>&1 || true; git worktree prune; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

die() { echo "bench-compare: $2" >&2; exit "$1"; }

go build -o "$tmp/compare" ./benchmarks/compare || die 1 "the working tree's benchmarks/compare does not build"
sel=$("$tmp/compare" check -bench "${BENCH:-}" -rounds "${ROUNDS:-}") || exit $?
benches=$(sed -n 1p <<<"$sel")
rounds=$(sed -n 2p <<<"$sel")

head=$(git rev-parse --short HEAD)
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  b_label="working tree at $head, with uncommitted changes"
else
  b_label="working tree at $head (no uncommitted changes)"
fi

# build SIDE SRC: each selected benchmark SRC has into $tmp/SIDE.
build() {
  mkdir -p "$tmp/$1"
  for b in $benches; do
    [ -d "$2/benchmarks/$b" ] || continue # missing on this side: compare says so
    (cd "$2" && go build -o "$tmp/$1/$b" "./benchmarks/$b") || return 1
  done
}

if [ -n "${BASE:-}" ]; then
  rev=$(git rev-parse --verify --quiet "${BASE}^{commit}") || die 2 "BASE=$BASE is not a git ref"
  wt="$tmp/base"
  git worktree add --detach --quiet "$wt" "$rev"
  a_label="BASE $BASE ($(git rev-parse --short "$rev"))"
  echo "== building A ($a_label) and B ($b_label)" >&2
  build a "$wt" || die 1 "BASE=$BASE does not build"
  build b . || die 1 "the working tree does not build"
  a_dir=$tmp/a
else
  [ "${A_ARGS:-}" != "${B_ARGS:-}" ] || die 2 "without BASE, A_ARGS and B_ARGS must differ (both sides are the working tree)"
  a_label="$b_label, with A_ARGS '${A_ARGS:-}'"
  b_label="$b_label, with B_ARGS '${B_ARGS:-}'"
  echo "== building the working tree (both sides)" >&2
  build b . || die 1 "the working tree does not build"
  a_dir=$tmp/b
fi

"$tmp/compare" run -a "$a_dir" -b "$tmp/b" -a-label "$a_label" -b-label "$b_label" \
  -bench "${benches// /,}" -rounds "$rounds" -args "${ARGS:-}" -a-args "${A_ARGS:-}" -b-args "${B_ARGS:-}" \
  -out "$out" -started "$started"
echo "elapsed: $(($(date +%s) - started)) s"
