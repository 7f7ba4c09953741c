#!/bin/sh
# CTest's dist_np<N>_every_case_ran: the cases colo_dist_tests skipped at N ranks, from the report
# its rank 0 wrote (tests/dist/main.cpp). Exits 77, which CTest shows as "Skipped", when any case
# skipped, so that a skip inside the one dist_np<N> job is seen, not counted as a pass.
#   sh every_case_ran.sh REPORT N
report=$1
ranks=$2
if [ ! -f "$report" ]; then
  echo "no report at $report: dist_np$ranks did not finish (run it first: ctest -R dist_np$ranks)"
  exit 1
fi
if [ -s "$report" ]; then
  echo "colo_dist_tests skipped these cases at $ranks ranks:"
  cat "$report"
  exit 77
fi
echo "every colo_dist_tests case ran at $ranks ranks"
