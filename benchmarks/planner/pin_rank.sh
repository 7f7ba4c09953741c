#!/bin/sh
# Runs one rank of a colo-run job on one CPU core (core (COLO_PIN_BASE + LOCAL_RANK) mod the
# machine's cores), one intra-op thread: what "CPU ranks, one core each" means in
# benchmarks/planner/error_table.py. With more ranks than cores, ranks share cores evenly (the
# cluster file's device.cores_per_node tells the planner so).
cores=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
core=$(( (${COLO_PIN_BASE:-0} + ${LOCAL_RANK:-0}) % cores ))
export OMP_NUM_THREADS=1
if command -v taskset >/dev/null 2>&1; then exec taskset -c "$core" "$@"; fi
exec "$@"
