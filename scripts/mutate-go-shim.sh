#!/usr/bin/env bash
# The `go` that scripts/mutate.sh puts first on gremlins' PATH (as "go").
#
# gremlins v0.6.0 names a mutant's package after the directory that ends in
# its Go package name and falls back to the module root otherwise: for
# sinks/mysql (package mysqlsink) every mutant ran `go test` on the module
# root, which has no Go files, and the "setup failed" exit status 1 was
# counted as KILLED. mutate.sh mutates one package per gremlins run and
# gremlins runs a mutant's tests in that package's directory, so a mutant
# run here tests "." instead. A mutant whose test binary does not build is
# reported with exit status 2, which gremlins counts as NOT VIABLE, not
# KILLED. Everything else goes to the real go unchanged.
set -uo pipefail
real=${MUTATE_REAL_GO:?}
if [ "${1:-}" = test ] && [[ " $* " != *" -coverprofile "* ]]; then
  set -- "${@:1:$#-1}" .
  out=$(mktemp)
  "$real" "$@" >"$out" 2>&1
  rc=$?
  cat "$out"
  if [ $rc -ne 0 ] && grep -qE '\[(build|setup) failed\]' "$out"; then
    rc=2
  fi
  rm -f "$out"
  exit $rc
fi
exec "$real" "$@"
