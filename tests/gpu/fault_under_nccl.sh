#!/usr/bin/env bash
# One fault under NCCL (issue 45): two ranks of colo_vit_bench (ViT-B/16 bf16, batch 64, a run far
# longer than the test) under PLUGIN with OPTS (comma-separated key=value); once both ranks train,
# rank 1 gets SIGNAL (KILL: a dead rank; STOP: a hung one). colo-run must then end the job on its own,
# naming rank 1, within the collective timeout (COLO_TIMEOUT_MS) plus its stop grace. Prints "fault:"
# lines: the exit code, the seconds from the signal to colo-run's exit, and its last lines.
#   COLO_TIMEOUT_MS=20000 bash tests/gpu/fault_under_nccl.sh KILL hybrid_parallel pp_size=2,num_microbatches=8
set -u
sig=$1 plugin=$2 opts=${3:-}
plugin_opts=()
IFS=, read -ra pairs <<<"$opts"
for pair in "${pairs[@]}"; do [ -n "$pair" ] && plugin_opts+=(--plugin-opt "$pair"); done
log=$(mktemp)
build-gpu/bin/colo-run --nproc-per-node 2 build-gpu/bin/colo_vit_bench --plugin "$plugin" "${plugin_opts[@]}" \
  --model base --batch-size 64 --precision bf16 --peak-tflops 1 --warmup-steps 100000 --steps 10 >"$log" 2>&1 &
job=$!
# The ranks train once the GPU is busy; give them the start-up and a few steps.
sleep "${COLO_FAULT_AFTER_S:-25}"
victim=""
for pid in $(pgrep -f "bin/colo_vit_bench"); do
  tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "RANK=1" && victim=$pid
done
if [ -z "$victim" ] || ! kill -0 "$job" 2>/dev/null; then
  echo "fault: the job was not running at the signal (victim '$victim')"
  tail -20 "$log"
  exit 2
fi
signalled=$(date +%s.%N)
kill -"$sig" "$victim"
# A job that outlives the timeout by a minute hangs: stop it and say so.
for _ in $(seq 1 900); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$job" 2>/dev/null; then
  echo "fault: HANG: colo-run still running 90 s after SIG$sig to rank 1"
  kill -CONT "$victim" 2>/dev/null
  kill -TERM "$job"
  sleep 5
  pkill -9 -f bin/colo_vit_bench
  tail -20 "$log"
  exit 1
fi
wait "$job"
rc=$?
elapsed=$(python3 -c "import time; print(f'{time.time() - $signalled:.1f}')")
kill -9 "$victim" 2>/dev/null
echo "fault: SIG$sig to rank 1 (pid $victim): colo-run exited rc=$rc after $elapsed s"
echo "fault: names rank 1 in its last line: $(tail -1 "$log" | grep -q 'rank 1' && echo yes || echo no)"
echo "fault: last line: $(tail -1 "$log")"
grep -E "rank 1|timed out|Timeout|NCCL" "$log" | grep -v '^\s*$' | tail -8
exit 0
