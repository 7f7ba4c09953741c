#!/bin/sh
# CTest's dist_np<N>: the whole colo_dist_tests suite at N ranks under colo-run. Eight ranks'
# interleaved output runs to thousands of lines, and a CI log keeps only its head and tail: when
# the job fails, this repeats at the end the lines that say what failed (gtest's failures and
# their messages, a rank's exit or signal), so the tail alone names the case and the rank.
#   sh run_with_recap.sh LOG COLO_RUN N TEST_BINARY
log=$1
colo_run=$2
ranks=$3
binary=$4
"$colo_run" --nproc-per-node "$ranks" --rdzv-file auto "$binary" >"$log" 2>&1
rc=$?
cat "$log"
if [ "$rc" -ne 0 ]; then
  echo "==== dist_np$ranks failed (exit $rc); what failed, from $log:"
  grep -E -A6 '(FAILED|Failure$|Expected|error:|what\(\)|terminate|exited with|signal|Aborted|timed out)' "$log" |
    grep -v -E '\] \[ +(RUN|OK) +\]' | tail -80
fi
exit "$rc"
