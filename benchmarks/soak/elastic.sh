#!/usr/bin/env bash
# Issue 36's elastic target on CPU ranks: a data-parallel 4 run (gemini, a small ViT, fp32) loses
# rank 3 (killed after step --crash-at, then its slot cannot start: COLO_FAULT nostart) and goes
# on under colo-run --elastic 2:4; the global batch stays, so its per-step losses must stay within
# 1e-5 of an uninterrupted dp 4 run's. Two cases: global batch 24 (3 ranks take it, 2 passes of 4)
# and 16 (3 ranks cannot split it: train_vit refuses that world and colo-run tries 2 ranks).
# A third run per case trains the smaller layout uninterrupted from step 1 (3 ranks x 2 passes,
# 2 ranks x 2 passes): how far two layouts' fp32 losses drift apart with no failure at all, the
# yardstick for the elastic run's drift (summation order differs; training amplifies it).
# Prints per case the attempts, the world the run finished on, the largest loss difference over
# the 100 steps after the change and over all the steps after it, the other layout's drift, and
# the wall times. Passes when the 100 steps after the change stay within 1e-5 and the elastic
# run drifts no farther than the other layout does.
#
#   bash benchmarks/soak/elastic.sh [--steps 300] [--crash-at 100] [--build build] [--out DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
steps=300 crash_at=100 build=build out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps=$2; shift 2 ;;
    --crash-at) crash_at=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "elastic.sh: unknown option $1 (see the comment at the top of $0)" >&2; exit 2 ;;
  esac
done
[ -n "$out" ] || out=$(mktemp -d /tmp/colo-elastic-XXXXXX)
mkdir -p "$out"
status=0
for batch in 24 16; do
  if [ "$batch" = 24 ]; then other=(--nproc-per-node 3); other_accum=2; else other=(--nproc-per-node 2); other_accum=2; fi
  common=(--dataset synthetic --synthetic-samples 480 --image-size 16 --model custom --patch-size 8 --embed-dim 32
    --depth 2 --heads 2 --batch-size "$batch" --threads 1 --log-every 1 --eval-batch-size 96 --epochs 100
    --max-steps "$steps" --checkpoint-every 10 --resume auto --plugin gemini)
  case_dir=$out/batch$batch
  rm -rf "$case_dir" && mkdir -p "$case_dir"
  start=$(date +%s.%N)
  OMP_NUM_THREADS=1 COLO_TIMEOUT_MS=10000 \
    COLO_FAULT="rank=3,step=$crash_at,kind=crash;rank=3,kind=nostart,restart=1" \
    "$build/bin/colo-run" --elastic 2:4 --max-restarts 5 --grace-period 1 "$build/bin/train_vit" "${common[@]}" \
    --save "$case_dir/elastic" --metrics "$case_dir/elastic.jsonl" >"$case_dir/elastic.out" 2>"$case_dir/elastic.err" ||
    { echo "batch $batch: the elastic run failed (see $case_dir/elastic.err)"; status=1; continue; }
  elastic_s=$(echo "$(date +%s.%N) - $start" | bc)
  start=$(date +%s.%N)
  OMP_NUM_THREADS=1 "$build/bin/colo-run" --nproc-per-node 4 "$build/bin/train_vit" "${common[@]}" \
    --save "$case_dir/clean" --metrics "$case_dir/clean.jsonl" >"$case_dir/clean.out" 2>"$case_dir/clean.err" ||
    { echo "batch $batch: the uninterrupted run failed (see $case_dir/clean.err)"; status=1; continue; }
  clean_s=$(echo "$(date +%s.%N) - $start" | bc)
  OMP_NUM_THREADS=1 "$build/bin/colo-run" "${other[@]}" "$build/bin/train_vit" "${common[@]}" --grad-accum "$other_accum" \
    --save "$case_dir/other" --metrics "$case_dir/other.jsonl" >"$case_dir/other.out" 2>"$case_dir/other.err" ||
    { echo "batch $batch: the other layout's run failed (see $case_dir/other.err)"; status=1; continue; }
  python3 - "$case_dir" "$batch" "$crash_at" "$elastic_s" "$clean_s" <<'PY' || status=1
import json, re, sys
case, batch, crash_at, elastic_s, clean_s = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
def losses(name):
    out = {}
    for line in open(f"{case}/{name}.jsonl"):
        r = json.loads(line)
        if r["event"] == "train":
            out[r["step"]] = r["loss"]
    return out
clean, elastic, other = losses("clean"), losses("elastic"), losses("other")
assert clean.keys() == elastic.keys() == other.keys(), "the runs logged other steps"
first = max(abs(elastic[s] - clean[s]) for s in clean if crash_at < s <= crash_at + 100)
after = [abs(elastic[s] - clean[s]) for s in clean if s > crash_at]
drift = max(abs(other[s] - clean[s]) for s in clean)
err = open(f"{case}/elastic.err").read()
out = open(f"{case}/elastic.out").read()
restarts = re.findall(r"colo-run: restart (\d+) of \d+ \(COLO_RESTART_COUNT=\d+\): starting (.*?) again after ([0-9.]+) s", err)
world = re.findall(r"train_vit: plugin \S+ \(\S+\), (\d+) ranks? \(([^)]*)\)", out)[-1]
elastic_line = re.findall(r"elastic: .*", out)
worst = max(after)
ok = first <= 1e-5 and worst <= drift
print(f"batch {batch}: {len(restarts) + 1} attempts ({'; '.join(f'{n}: {what} after {s} s' for n, what, s in restarts)}); "
      f"finished on {world[0]} ranks ({world[1]}); {elastic_line[-1] if elastic_line else ''}; "
      f"largest |loss - uninterrupted dp 4|: steps {crash_at + 1}..{crash_at + 100} {first:.3g}, "
      f"steps {crash_at + 1}..{max(clean)} {worst:.3g}; the other layout uninterrupted from step 1: {drift:.3g}; "
      f"wall {elastic_s:.1f} s vs {clean_s:.1f} s uninterrupted; {'PASS' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
PY
done
echo "logs: $out"
exit $status
