#!/usr/bin/env bash
# The failure soak (issue 36): 4 CPU ranks train a small ViT for --steps steps under colo-run
# --max-restarts and train_vit --resume auto while this script kills random ranks from outside
# (kill -9) and stops some (SIGSTOP: a hang, which the collective timeout must catch). Each layout
# must finish on its own with final weights bit-identical to an uninterrupted run's (same seed,
# same checkpoint interval). Reports per layout: restarts, lost steps, time to recover per failure.
#
#   bash benchmarks/soak/soak.sh                      the full soak: 300 steps, 20 kills, 3 hangs
#   bash benchmarks/soak/soak.sh --steps 30 --kills 2 --hangs 1 --layouts tp2pp2   a short one
#
# Options: --steps N, --kills N, --hangs N, --every N (checkpoint interval, default 10),
# --timeout-ms N (COLO_TIMEOUT_MS, default 10000), --layouts "tp2pp2 gemini_dp4", --build DIR
# (default build), --out DIR (default a fresh temporary directory, kept). Exit status 0 when every
# layout finished with identical weights.
set -euo pipefail
cd "$(dirname "$0")/../.."

steps=300 kills=20 hangs=3 every=10 timeout_ms=10000 layouts="tp2pp2 gemini_dp4" build=build out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps=$2; shift 2 ;;
    --kills) kills=$2; shift 2 ;;
    --hangs) hangs=$2; shift 2 ;;
    --every) every=$2; shift 2 ;;
    --timeout-ms) timeout_ms=$2; shift 2 ;;
    --layouts) layouts=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "soak.sh: unknown option $1 (see the comment at the top of $0)" >&2; exit 2 ;;
  esac
done
colo_run=$build/bin/colo-run
train_vit=$build/bin/train_vit
for binary in "$colo_run" "$train_vit"; do
  [ -x "$binary" ] || { echo "soak.sh: $binary is not built (cmake --build $build)" >&2; exit 2; }
done
[ -n "$out" ] || out=$(mktemp -d /tmp/colo-soak-XXXXXX)
mkdir -p "$out"

layout_args() {
  case "$1" in
    tp2pp2) echo "--plugin hybrid_parallel --plugin-opt tp_size=2 --plugin-opt pp_size=2 --plugin-opt num_microbatches=2" ;;
    gemini_dp4) echo "--plugin gemini" ;;
    *) echo "soak.sh: unknown layout $1 (tp2pp2, gemini_dp4)" >&2; exit 2 ;;
  esac
}

# A small ViT on synthetic 32x32 images: 4 steps an epoch at 4 data-parallel ranks (gemini) and
# 16 at 1 (tp2 x pp2); enough epochs for --steps.
train_args() {
  local epochs=$(( steps / 4 + 1 ))
  echo "--dataset synthetic --synthetic-samples 256 --image-size 32 --model custom --patch-size 8 --embed-dim 64" \
       "--depth 4 --heads 4 --batch-size 16 --threads 1 --log-every 1 --eval-batch-size 64 --epochs $epochs" \
       "--max-steps $steps --checkpoint-every $every --resume auto"
}

# Prefixes each line with the time (seconds since the epoch, with fractions).
stamp() { perl -MTime::HiRes=time -ne 'BEGIN { $| = 1 } printf "%.3f %s", time, $_'; }

# The ranks colo-run started (its direct children running train_vit), one picked at random. Not any
# child: the time stamper that reads colo-run's output is one too (bash forks it before exec'ing
# colo-run), and killing it ends the job with SIGPIPE instead of testing a restart.
random_rank_pid() { pgrep -P "$1" -x "$(basename "$train_vit")" | shuf -n 1 || true; }

# How many restarts colo-run has logged so far.
restart_lines() { local n; n=$(grep -c "colo-run: restart [0-9]* of" "$1" 2>/dev/null); echo "${n:-0}"; }

# How many events of a kind were sent (0 when none: grep -c prints 0 and fails then).
count_events() { local n; n=$(grep -c "$1" "$2" 2>/dev/null); echo "${n:-0}"; }

status=0
summary=$out/summary.txt
: >"$summary"
for layout in $layouts; do
  dir=$out/$layout
  rm -rf "$dir"; mkdir -p "$dir"
  read -r -a plugin <<<"$(layout_args "$layout")"
  read -r -a args <<<"$(train_args)"
  echo "soak.sh: $layout: the uninterrupted run" >&2
  export OMP_NUM_THREADS=1 COLO_TIMEOUT_MS=$timeout_ms
  "$colo_run" --nproc-per-node 4 "$train_vit" "${plugin[@]}" "${args[@]}" --save "$dir/reference" \
    >"$dir/reference.log" 2>&1 || { echo "soak.sh: $layout: the uninterrupted run failed: $dir/reference.log" >&2; status=1; continue; }

  echo "soak.sh: $layout: the run under $kills kills and $hangs hangs" >&2
  start=$(date +%s.%N)
  "$colo_run" --nproc-per-node 4 --max-restarts $(( kills + hangs + 5 )) --grace-period 1 "$train_vit" "${plugin[@]}" \
    "${args[@]}" --save "$dir/soak" > >(stamp >"$dir/soak.log") 2>&1 &
  job=$!
  # The failures in random order, each 2-6 s after the previous failure's restart (a start-up takes ~5 s on
  # 2 loaded cores: some land while an attempt starts, most while it trains).
  events=$( (for _ in $(seq "$kills"); do echo kill; done; for _ in $(seq "$hangs"); do echo hang; done) | shuf)
  for event in $events; do
    sleep "$(awk -v s="$RANDOM" 'BEGIN{srand(s); printf "%.2f", 2 + rand() * 4}')"
    kill -0 "$job" 2>/dev/null || break
    pid=$(random_rank_pid "$job")
    [ -n "$pid" ] || continue
    restarts=$(restart_lines "$dir/soak.log")
    if [ "$event" = kill ]; then kill -9 "$pid" 2>/dev/null || true; else kill -STOP "$pid" 2>/dev/null || true; fi
    echo "$(date +%s.%N) $event $pid" >>"$dir/events.txt"
    # Each event its own failure: the next waits for this one's restart (a hang's takes the timeout),
    # so that a stopped rank is caught by the timeout, not ended by the next kill.
    for _ in $(seq $(( timeout_ms / 1000 * 4 + 60 ))); do
      [ "$(restart_lines "$dir/soak.log")" -gt "$restarts" ] && break
      kill -0 "$job" 2>/dev/null || break
      sleep 0.25
    done
  done
  wait "$job" || {
    echo "soak.sh: $layout: colo-run exited with status $?; the run under failures did not finish: $dir/soak.log" >&2
    status=1; }
  sleep 1  # the time stamper's last lines
  elapsed=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b - a}')

  same=no
  # Every model file of the final state (one, or a sharded set and its index).
  if [ "$(readlink "$dir/reference/latest")" = "$(readlink "$dir/soak/latest")" ]; then
    same=yes
    for file in "$dir"/reference/latest/model*; do
      cmp -s "$file" "$dir/soak/latest/$(basename "$file")" || same=no
    done
  fi
  [ "$same" = yes ] || status=1
  # Lost steps: the steps trained more than once (rank 0 logs every step, so every attempt's step lines
  # counted, less the last step). Per failure, from the event that caused a restart (the latest kill or
  # stop sent before it) to the next step any attempt trains: a failure while an attempt starts counts
  # until training goes on. A hang's includes the timeout that detects it (--timeout-ms).
  report=$(awk -v events="$dir/events.txt" '
    BEGIN { n = 0; while ((getline line < events) > 0) { split(line, f, " "); n++; when[n] = f[1]; what[n] = f[2] } }
    / step [0-9]+\/[0-9]+/ { for (i = 1; i <= NF; i++) if ($i == "step") { split($(i+1), s, "/"); last = s[1] + 0 }
                              executed++
                              for (p in pending) { recover[p] = $1 - failed_at[p]; delete pending[p] } }
    /colo-run: restart [0-9]+ of/ { r++; failed_at[r] = $1; kind[r] = "other"
                                    for (k = n; k >= 1; k--) if (when[k] <= $1) { failed_at[r] = when[k]; kind[r] = what[k]; break }
                                    pending[r] = 1 }
    END {
      for (i = 1; i <= r; i++) { k = kind[i]; c[k]++; sum[k] += recover[i]; v[k, c[k]] = recover[i] }
      printf "restarts %d, lost steps %d", r, executed - last
      for (k in c) {
        for (i = 2; i <= c[k]; i++) for (j = i; j > 1 && v[k, j - 1] > v[k, j]; j--) { t = v[k, j]; v[k, j] = v[k, j - 1]; v[k, j - 1] = t }
        printf ", recovery after a %s: median %.1f s, mean %.1f s, worst %.1f s (%d)", k, v[k, int((c[k] + 1) / 2)],
               sum[k] / c[k], v[k, c[k]], c[k]
      }
    }' "$dir/soak.log")
  line="$layout: $steps steps, $(count_events kill "$dir/events.txt") kills and $(count_events hang "$dir/events.txt") hangs sent; $report; $elapsed s in all; final weights identical to the uninterrupted run's: $same"
  echo "$line" | tee -a "$summary"
done
echo "soak.sh: logs and states in $out" >&2
exit $status
