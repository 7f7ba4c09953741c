#!/usr/bin/env bash
# Every parallel layout on one GPU (issue 41): train_vit for a few steps under each layout, all its
# ranks on GPU 0 over Gloo (COLO_BACKEND=gloo, set by the caller), and each run's per-step training
# losses against those of the one-rank run in the same precision. Prints a table and, last, a line
# "one-gpu layouts: PASS ..." (exit 0) or "one-gpu layouts: FAIL ..." (exit 1).
#
#   COLO_BACKEND=gloo bash tests/gpu/one_gpu_layouts.sh [--build-dir DIR] [--out DIR] [--steps N]
#       [--precisions "fp32 bf16"] [--layouts "tp2 pp2_1f1b ..."] [--fp8] [--timeout SECONDS]
#
# Without COLO_BACKEND on a machine without GPUs the same runs go on CPU ranks (how this script
# is itself tested). Layouts (NAME: ranks, plugin and options):
#   tp2              2  hybrid_parallel tp_size=2
#   pp2_1f1b         2  hybrid_parallel pp_size=2, 4 microbatches, 1F1B
#   pp2_interleaved  2  hybrid_parallel pp_size=2, 4 microbatches, interleaved with 2 chunks per rank
#   tp2_pp2          4  hybrid_parallel tp_size=2 pp_size=2, 4 microbatches
#   gemini_dp2       2  gemini (data parallel)
#   zero_dp2         2  low_level_zero (data parallel, ZeRO stage 2)
# and, asked for by --layouts only (8 ranks take a while on CPU):
#   tp4_2d           4  hybrid_parallel tp_size=4 tp_mode=2d (a 2 x 2 grid)
#   tp8_2p5d         8  hybrid_parallel tp_size=8 tp_mode=2.5d tp_depth=2 (2 layers of a 2 x 2 grid)
#   tp8_3d           8  hybrid_parallel tp_size=8 tp_mode=3d (a 2 x 2 x 2 cube)
# against torch_ddp on one rank. --fp8 adds tp2 in precision fp8 against one rank in fp8 (float8
# products need a GPU of compute capability 8.9 or newer). The model is train_vit's `mini` ViT
# (width 96, 4 heads, 4 blocks) on synthetic 32x32 images, global batch 16, the same seed
# everywhere: every layout trains on the same global batches from the same weights.
#
# Bounds (relative, on every step's loss):
#   fp32  1e-5: the layouts differ only in the order of floating-point sums (and, under tp, in
#         which GEMM kernels split the products): tests/dist/plugin_equivalence.h's kFp32Tolerance.
#   bf16  5e-3: kBf16LossTolerance, tests/dist/plugin_equivalence.h (bf16 keeps 8 significant bits).
#   fp8   2e-2: tests/dist/fp8_test.cpp's bound of fp8 against bf16 (e4m3 keeps 3 mantissa bits;
#         under tp each rank scales its own shard of a weight).
set -uo pipefail

build=build-gpu
[ -d "$build" ] || build=build
out=""
steps=5
precisions="fp32 bf16"
all_layouts="tp2 pp2_1f1b pp2_interleaved tp2_pp2 gemini_dp2 zero_dp2"
layouts=$all_layouts
known_layouts="$all_layouts tp4_2d tp8_2p5d tp8_3d"
fp8=0
per_run_timeout=240
while [ $# -gt 0 ]; do
  case $1 in
    --build-dir) build=$2 && shift 2 ;;
    --out) out=$2 && shift 2 ;;
    --steps) steps=$2 && shift 2 ;;
    --precisions) precisions=$2 && shift 2 ;;
    --layouts) layouts=$2 && shift 2 ;;
    --fp8) fp8=1 && shift ;;
    --timeout) per_run_timeout=$2 && shift 2 ;;
    -h | --help) sed -n '2,32p' "$0" && exit 0 ;;
    *) echo "one_gpu_layouts.sh: unknown argument '$1' (see --help)" >&2 && exit 2 ;;
  esac
done
for layout in $layouts; do
  case " $known_layouts " in
    *" $layout "*) ;;
    *) echo "one_gpu_layouts.sh: unknown layout '$layout'; the layouts are: $known_layouts" >&2 && exit 2 ;;
  esac
done
for binary in colo-run train_vit; do
  if [ ! -x "$build/bin/$binary" ]; then
    echo "one_gpu_layouts.sh: $build/bin/$binary is missing: build it, or give --build-dir" >&2
    exit 2
  fi
done
[ -n "$out" ] || out=$(mktemp -d /tmp/one_gpu_layouts.XXXXXX)
mkdir -p "$out"
export COLO_TIMEOUT_MS=${COLO_TIMEOUT_MS:-60000}

# layout NAME: sets ranks, plugin and opts (--plugin-opt arguments) for a layout.
layout() {
  ranks=2 plugin=hybrid_parallel opts=()
  local pipeline=(--plugin-opt pp_size=2 --plugin-opt num_microbatches=4)
  case $1 in
    one) ranks=1 plugin=torch_ddp ;;
    tp2) opts=(--plugin-opt tp_size=2) ;;
    pp2_1f1b) opts=("${pipeline[@]}" --plugin-opt pp_style=1f1b) ;;
    pp2_interleaved) opts=("${pipeline[@]}" --plugin-opt pp_style=interleaved --plugin-opt num_model_chunks=2) ;;
    tp2_pp2) ranks=4 opts=(--plugin-opt tp_size=2 "${pipeline[@]}") ;;
    gemini_dp2) plugin=gemini ;;
    zero_dp2) plugin=low_level_zero opts=(--plugin-opt stage=2) ;;
    tp4_2d) ranks=4 opts=(--plugin-opt tp_size=4 --plugin-opt tp_mode=2d) ;;
    tp8_2p5d) ranks=8 opts=(--plugin-opt tp_size=8 --plugin-opt tp_mode=2.5d --plugin-opt tp_depth=2) ;;
    tp8_3d) ranks=8 opts=(--plugin-opt tp_size=8 --plugin-opt tp_mode=3d) ;;
  esac
}

# train NAME PRECISION: one run; its metrics in $out/NAME_PRECISION.jsonl, its output beside.
train() {
  layout "$1"
  local tag=$1_$2
  rm -f "$out/$tag.jsonl"
  timeout "$per_run_timeout" "$build/bin/colo-run" --nproc-per-node "$ranks" --rdzv-file auto "$build/bin/train_vit" \
    --plugin "$plugin" "${opts[@]}" --precision "$2" --model mini --dataset synthetic --synthetic-samples 160 \
    --batch-size 16 --eval-batch-size 16 --epochs 1 --max-steps "$steps" --log-every 1 --seed 7 \
    --metrics "$out/$tag.jsonl" >"$out/$tag.log" 2>&1
  echo $? >"$out/$tag.rc"
  echo "  $tag ($ranks rank(s), $plugin ${opts[*]}): rc=$(cat "$out/$tag.rc") ($SECONDS s)"
}

echo "one-gpu layouts: COLO_BACKEND=${COLO_BACKEND:-(unset)}, $build, $steps steps, logs in $out"
command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | sed 's/^/  /'
runs=()  # NAME:PRECISION:BOUND, compared with one:PRECISION
for precision in $precisions; do
  case $precision in
    fp32) bound=1e-5 ;;
    bf16) bound=5e-3 ;;
    *) echo "one_gpu_layouts.sh: precision '$precision': fp32 or bf16 (fp8 comes with --fp8)" >&2 && exit 2 ;;
  esac
  train one "$precision"
  for name in $layouts; do
    train "$name" "$precision"
    runs+=("$name:$precision:$bound")
  done
done
if [ "$fp8" = 1 ]; then
  train one fp8
  train tp2 fp8
  runs+=("tp2:fp8:2e-2")
fi

python3 - "$out" "$steps" "${runs[@]}" <<'EOF'
import json, os, sys

out, steps, runs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]

def losses(tag):
    """Per-step training losses of a run, or a reason why there are none."""
    rc = open(os.path.join(out, tag + ".rc")).read().strip()
    path = os.path.join(out, tag + ".jsonl")
    if rc != "0" or not os.path.exists(path):
        log = os.path.join(out, tag + ".log")
        tail = open(log, errors="replace").read().strip().splitlines()[-3:] if os.path.exists(log) else []
        return None, f"exit status {rc}: " + " | ".join(tail)
    found = {}
    for line in open(path):
        record = json.loads(line)
        if record.get("event") == "train":
            found[record["step"]] = record["loss"]
    values = [found.get(s) for s in range(1, steps + 1)]
    if None in values:
        return None, f"steps logged: {sorted(found)}, expected 1..{steps}"
    return values, ""

rows, failed = [], []
for run in runs:
    name, precision, bound = run.split(":")
    bound = float(bound)
    want, why_want = losses("one_" + precision)
    got, why_got = losses(name + "_" + precision)
    if want is None or got is None:
        rows.append((name, precision, "-", "-", f"{bound:.0e}", "FAIL", why_got or "one-rank run: " + why_want))
        failed.append(f"{name} {precision}")
        continue
    errors = [abs(g - w) / abs(w) for g, w in zip(got, want)]
    worst = max(errors)
    ok = all(e <= bound for e in errors)  # NaN fails too
    rows.append((name, precision, f"{got[-1]:.6f}", f"{worst:.2e}", f"{bound:.0e}", "ok" if ok else "FAIL",
                 "" if ok else "step losses " + ", ".join(f"{g:.7g}/{w:.7g}" for g, w in zip(got, want))))
    if not ok:
        failed.append(f"{name} {precision}")

print()
print("| layout | precision | last loss | max rel. error (steps 1-%d) | bound | result | notes |" % steps)
print("| --- | --- | --- | --- | --- | --- | --- |")
for row in rows:
    print("| " + " | ".join(row) + " |")
print()
if failed:
    print(f"one-gpu layouts: FAIL ({len(failed)} of {len(rows)} runs: {', '.join(failed)})")
    sys.exit(1)
print(f"one-gpu layouts: PASS ({len(rows)} runs matched the one-rank run)")
EOF
