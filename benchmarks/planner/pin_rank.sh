#!/bin/sh
# Runs one rank of a colo-run job on its own CPU core (core COLO_PIN_BASE + LOCAL_RANK), one
# intra-op thread: what "two CPU ranks, one core each" means in benchmarks/planner/error_table.py.
core=$(( ${COLO_PIN_BASE:-0} + ${LOCAL_RANK:-0} ))
export OMP_NUM_THREADS=1
if command -v taskset >/dev/null 2>&1; then exec taskset -c "$core" "$@"; fi
exec "$@"
