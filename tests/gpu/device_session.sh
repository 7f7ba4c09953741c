#!/usr/bin/env bash
# One call on the GPU machine (device tool): build the CUDA build, run the 2-GPU distributed
# tests over NCCL, the ViT-B/16 timm parity check, and the ViT-B/16 benchmarks with their peers.
# Logs and JSON records go to $OUT. Usage (from the repo root, .gpu-deps carried):
#   bash tests/gpu/device_session.sh [build|all]
set -uo pipefail
# The device returns at most 8 files: logs go to LOGS, and LOGS travels back as one archive.
OUT=${OUT:-/tmp/colo-out}
LOGS=/tmp/colo-logs
mkdir -p "$OUT" "$LOGS"
trap 'tar czf "$OUT/logs.tgz" -C "$LOGS" . ; cp "$LOGS/summary.txt" "$LOGS/tables.md" "$OUT/" 2>/dev/null' EXIT
bash .gpu-deps/unpack-deps.sh >"$LOGS/deps.log" 2>&1
source /opt/colo-deps/env.sh
nvidia-smi -L >"$LOGS/gpus.txt" 2>&1
ngpu=$(nvidia-smi -L | wc -l)
{
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOLO_BUILD_TESTS=ON -DCOLO_BUILD_BENCHMARKS=ON &&
    cmake --build build-gpu -j "$(nproc)"
} >"$LOGS/build.log" 2>&1
echo "build rc=$?" | tee -a "$LOGS/summary.txt"
[ "${1:-all}" = build ] && exit 0

# Distributed tests over NCCL, one process per GPU.
COLO_TIMEOUT_MS=60000 timeout 300 build-gpu/bin/colo-run --nproc-per-node "$ngpu" --rdzv-file auto \
  build-gpu/bin/colo_dist_tests >"$LOGS/dist_tests.log" 2>&1
echo "dist tests on $ngpu GPUs rc=$?" | tee -a "$LOGS/summary.txt"

# ViT-B/16 parity with timm (fp32 logits 1e-5, gradients 1e-4), on CUDA.
(cd build-gpu && timeout 300 ctest -L gpu --output-on-failure) >"$LOGS/parity.log" 2>&1
echo "gpu parity rc=$?" | tee -a "$LOGS/summary.txt"

# Benchmarks: ViT-B/16 224², bf16, batch 256 per GPU; colo torch_ddp vs timm eager / compile / DDP.
common=(--model base --batch-size 256 --precision bf16 --warmup-steps 10 --steps 30)
timeout 200 python3 benchmarks/peers/run_all.py --build-dir build-gpu --nproc 1 "${common[@]}" \
  --plugins torch_ddp --peers eager compile --out "$LOGS/b1" >"$LOGS/bench1.log" 2>&1
echo "bench 1 GPU rc=$?" | tee -a "$LOGS/summary.txt"
if [ "$ngpu" -ge 2 ]; then
  timeout 150 python3 benchmarks/peers/run_all.py --build-dir build-gpu --nproc 2 "${common[@]}" \
    --plugins torch_ddp --peers ddp --out "$LOGS/b2" >"$LOGS/bench2.log" 2>&1
  echo "bench 2 GPUs rc=$?" | tee -a "$LOGS/summary.txt"
fi
cat "$LOGS"/b*/table.md >"$LOGS/tables.md" 2>/dev/null
tail -5 "$LOGS/build.log" >>"$LOGS/summary.txt"
exit 0
