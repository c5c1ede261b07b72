#!/usr/bin/env bash
# make mutate: mutation testing of the exactly-once files (issue 21) with
# gremlins (github.com/go-gremlins/gremlins, pinned below). Not part of
# `make test`: it takes tens of minutes (docs/reliability.md, "Mutation
# testing", has the last numbers and how long each file took).
#
#   ./scripts/mutate.sh                          # every file in TARGETS
#   ./scripts/mutate.sh producers/relay/tracker.go sinks/mysql/store.go
#   MUTATE_WORKERS=2 ./scripts/mutate.sh ...     # parallel mutants (default 1)
#
# Each file is mutated alone (gremlins --exclude-files for every other file
# of its package) and each mutant runs only the tests that cover that file
# (GOFLAGS=-run=... -failfast, which both gremlins' coverage run and its per-mutant
# `go test <package>` inherit; vet off and no DWARF to cut the build of
# every mutant), so a slow package costs its filtered tests,
# not its whole suite, per mutant. Needs MariaDB on 127.0.0.1:3306 like
# make test. Per file it prints gremlins' verdicts (KILLED, LIVED, TIMED
# OUT, NOT COVERED, NOT VIABLE) and a summary line; results go to
# .mutate/<file>.txt and the table to .mutate/summary.md.
set -euo pipefail
cd "$(dirname "$0")/.."

GREMLINS=${GREMLINS:-"go run github.com/go-gremlins/gremlins/cmd/gremlins@v0.6.0"}
WORKERS=${MUTATE_WORKERS:-1}
# A mutant's tests may run this many times as long as the coverage run of
# the same tests before it is declared TIMED OUT (the mutant recompiles the
# package, the coverage run's time includes a warm build).
COEFF=${MUTATE_TIMEOUT_COEFFICIENT:-8}
OUT=.mutate

# The tests of the exactly-once runtime (processors/streams), whose loop
# and transaction code is spread over the files of its parts.
STREAMS_TESTS='^(TestStatefulExactlyOnceAcrossCrashes|TestStatefulRestoreAfterRestart|TestDeletedKeyStaysDeletedAfterRestore|TestRebalanceBetweenInstances|TestTxnOffsetCommitTimeoutAbortsAndRewinds|TestRejectGoesToDLQAndPartitionMovesOn|TestCorruptStateGoesToDLQ|TestInputOutOfRangeStopsThePartition|TestInputLeaderMoveDoesNotRewind|TestAssignedAgainRestoresAfresh|TestShutdownBoundedWhileJoinGroupHangs|TestStopWhileCheckingTopicsReturnsNil|TestNewValidatesConfig|TestPunctuationLSOBoundaryDataRecord|TestTimerFiresOnIdlePartition|TestZombieIsFenced|TestFailingRecordStallsOnlyItsPartition|TestFailedProduceAbortsAndRewinds|TestGroupChangesAreLogged|TestTransactionHoldsAtMostCommitRecords|TestStateGaugesFollowOwnership|TestLagIsPublishedPerOwnedPartition|TestStallOfFirstAndLastRecordRecovers|TestOutputTimestampsFollowProcessing|TestRepeatedCommitFailuresBackOffLonger|TestPunctuationCatchUpIsNotHeld|TestPunctuationOutputNeedsConfirmedMembership|TestRevokedPartitionIsDropped|TestRestoreOptsCopyTheConnection|TestPartitionerKeepsChangelogPartition|TestRemoveAllDropsRevoked|TestRestoreMarkerFencedIsFatal|TestTxnPollStamps|TestTxnDue|TestTxnFinishCounts|TestTxnPollWhenDuePollsNothing|TestTxnMembershipCheckedForPunctuationOutputOnly|TestAssignmentQueuesEvents|TestAssignmentOwnsTasksAndStores|TestStallTracker.*)$'

# The draw transaction's files (store.go split by concern) share one filter.
LUCKY_STORE_TESTS='^(TestRiskCounters|TestPickVersion|TestBadRequests|TestAdmin|TestSynchronousDispatch|TestDrawTimeoutRetry|TestDuplicateCommandStorm|TestStreamClaim|TestKillSwitches|TestDrawsAuditAndInvariants|TestLowWaterAndUserDailyCap|TestCrashBetweenCommitAndDispatch|TestConcurrentDrawsOneRoomAndGift|TestConfigRiskCaps|TestDrawCreatesMissingPools|TestPoolChangedCarriesTheBalance|TestRiskSnapshotCapacity|TestDrawErrorsAreTimeouts|TestDeadlockReadingNewCounters|TestNextBatchStartsWhileOneCommits)'
PUNCTUATOR_TESTS='^(TestPunctuation|TestPunctuatorOpensRoundsAtTheLSO|TestTimerFiresOnIdlePartition|TestFailingPunctuationIsRetriedAlone|TestZombiePunctuationIsFenced|TestExpiredKeySweptOnIdlePartition)'

# The tests of the relay's binlog mode (their binlog subtests; "mariadb" is
# TestBinlogSnapshotUnderWrites', the other names TestStreamStateGTIDSetAcrossFailover's
# cases), whose code is spread over the files of its parts.
BINLOG_TESTS='^(TestBinlog.*|TestStreamState.*|TestFirstStartBelowLowestID|TestIDReissueStops|TestDeadLetters|TestHoleSurvivesRestart|TestFencedLeaderCannotCommit|TestLateRowKeepsRoomOrderInFullBatches|TestByteBudgetKeepsRoomOrder|TestBatchBytesBounded|TestRelayLagGrowsWithoutMySQL|TestCrashExactlyOnce|TestOutOfOrderCommit|TestRestoredGapsIgnoreClockSkew)$/^(binlog|mariadb|same_server|new_primary|other_domain_kept|new_domain|two_of_one_domain_stored|empty)$'

# file|tests that cover it (a go test -run regexp, no spaces).
TARGETS=(
  "producers/relay/tracker.go|^(TestTracker|TestRuns|TestFillTwice|TestExpireAtExactly|TestMaxOpenGaps|TestProbeIDs|TestPositionCodec|TestGapAge|TestMaxPositionBytes|TestTrackerEncode)"
  "producers/relay/position.go|^(TestPosition|TestDecodePositionBounds|TestMaxUvarintSum|TestMaxPositionBytes|TestMaxOpenGapsFor|TestGapAge|TestTrackerEncode|TestNewRejectsOpenGaps|TestRunsGroupsConsecutive)"
  "producers/relay/source.go|^(TestBudget|TestReissue|TestAutoIncrement|TestOutOfOrderCommit|TestByteBudgetKeepsRoomOrder|TestBatchBytesBounded|TestOldestUnrelayed)/^(poll|mariadb)$"
  "producers/relay/binlog.go|$BINLOG_TESTS"
  "producers/relay/binlog_checks.go|$BINLOG_TESTS"
  "producers/relay/binlog_rows.go|$BINLOG_TESTS"
  "producers/relay/binlog_state.go|$BINLOG_TESTS"
  "producers/relay/binlog_stream.go|$BINLOG_TESTS"
  "producers/relay/binlog_snapshot.go|$BINLOG_TESTS"
  "processors/streams/runtime.go|$STREAMS_TESTS"
  "processors/streams/connect.go|$STREAMS_TESTS"
  "processors/streams/loop.go|$STREAMS_TESTS"
  "processors/streams/txn.go|$STREAMS_TESTS"
  "processors/streams/assignment.go|$STREAMS_TESTS"
  "processors/streams/stall.go|$STREAMS_TESTS"
  "processors/streams/punctuator.go|$PUNCTUATOR_TESTS"
  "sinks/mysql/store.go|^(TestOffsetRowsInOneOrder|TestApplyLocksOnlyItsPartitions|TestApplySkipsExactlyWhatIsStored|TestCrashRightAfterCommit|TestChunkedDedupe|TestConsumeKeepsFirst|TestStoreFencesRevokedOwner|TestReplayChangesNothing)"
  "sinks/mysql/consume.go|^(TestChunkedDedupe|TestConsumeKeepsFirst|TestReplayChangesNothing|TestApplySkipsExactlyWhatIsStored)"
  "sinks/imoutbox/repo.go|^(TestClaim|TestFastPathRowChanged|TestBacklog|TestReleaseRestores|TestMarksDoNotWait|TestAlreadyDelivered|TestCrashBetweenSendAndMark|TestPublishFailureRetryable)"
  "sinks/imoutbox/fastpath.go|^(TestFastPath|TestGiveUp|TestDrainWaits|TestOnAssigned|TestDropHeld|TestHeldRecordsAreNotCommitted|TestAlreadyDelivered|TestSyncFailedRow)"
  "processors/mic/engine.go|^(TestHandleTable|TestCompensate|TestSelectDue|TestPropertyRandomStreams|TestScratchMatchesFreshOutputs|TestWatermarkAndRetention|TestRoomCountPerUserDay|TestTooOld|TestRoomVersionZero|TestPublishConfirmedSeat|TestDueAtMs)"
  "processors/mic/days.go|^(TestSplitDays|TestRoomCountPerUserDay|TestDayOf|TestPropertyRandomStreams)"
  "services/luckydraw/draw.go|^(TestPlanDraw|TestNewPlan|TestInflowLayers|TestRuleNeeds|TestSelectCumulative|TestRewardCoins|TestRiskRemaining|TestNoneTierFirst|TestOutcomeHit)"
  "services/luckydraw/store.go|$LUCKY_STORE_TESTS"
  "services/luckydraw/drawone.go|$LUCKY_STORE_TESTS"
  "services/luckydraw/pools.go|$LUCKY_STORE_TESTS"
  "services/luckydraw/counters.go|$LUCKY_STORE_TESTS"
  "services/luckydraw/records.go|$LUCKY_STORE_TESTS"
  "services/luckydraw/rulerows.go|$LUCKY_STORE_TESTS"
  "services/luckydraw/fenced.go|^(TestSwitchWaitsForTheBatchThatSawTheOldState|TestTierDisableWaitsForTheBatchThatSawIt|TestOneOutcomePerCommandAcrossReplicas|TestKillSwitches|TestPickVersion|TestDrawsAuditAndInvariants)"
)

# gremlins runs `go` from PATH: the shim fixes the package a mutant's tests
# run in and tells a mutant that does not build from a killed one.
shim=$(mktemp -d)
trap 'rm -rf "$shim"' EXIT
MUTATE_REAL_GO=$(command -v go)
export MUTATE_REAL_GO
ln -s "$PWD/scripts/mutate-go-shim.sh" "$shim/go"
export PATH="$shim:$PATH"

want=("$@")
mkdir -p "$OUT"
summary="$OUT/summary.md"
[ -f "$summary" ] || printf '| file | killed | lived | timed out | not covered | not viable | efficacy | minutes |\n|---|---|---|---|---|---|---|---|\n' >"$summary"
for t in "${TARGETS[@]}"; do
  file=${t%%|*}
  run=${t#*|}
  if [ ${#want[@]} -gt 0 ] && [[ ! " ${want[*]} " == *" $file "* ]]; then
    continue
  fi
  dir=$(dirname "$file")
  base=$(basename "$file")
  ex=()
  while IFS= read -r f; do
    [ "$f" = "$base" ] || ex+=(--exclude-files "(^|/)${f//./\\.}\$")
  done < <(cd "$dir" && find . -name '*.go' ! -name '*_test.go' | sed 's#^\./##')
  log="$OUT/${file//\//_}.txt"
  echo "== $file (tests: $run)"
  start=$(date +%s)
  # gremlins exits non-zero only for a missed threshold (none set here).
  GOFLAGS="-count=1 -p=1 -failfast -vet=off -ldflags=-w -run=$run" $GREMLINS unleash --workers "$WORKERS" --timeout-coefficient "$COEFF" \
    "${ex[@]}" "./$dir" 2>&1 | tee "$log" | grep -E '^ *(LIVED|TIMED OUT|NOT COVERED)' || true
  mins=$(awk -v s="$start" -v e="$(date +%s)" 'BEGIN { printf "%.1f", (e - s) / 60 }')
  count() { grep -cE "^ *$1 " "$log" || true; }
  k=$(count KILLED); l=$(count LIVED); to=$(count 'TIMED OUT'); nc=$(count 'NOT COVERED'); nv=$(count 'NOT VIABLE')
  eff=$(awk -v k="$k" -v l="$l" -v t="$to" 'BEGIN { n = k + l; if (n) printf "%.1f%%", 100 * k / n; else print "-" }')
  printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$file" "$k" "$l" "$to" "$nc" "$nv" "$eff" "$mins" | tee -a "$summary"
done
echo "summary: $summary"
