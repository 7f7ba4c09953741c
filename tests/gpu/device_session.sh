#!/usr/bin/env bash
# GPU-machine session (device tool), in stages so that each call stays under the 10-minute limit
# while the warm machine keeps build-gpu/ between calls. Logs and JSON records go to $OUT as
# one archive (the device returns only a few files). From the repo root, .gpu-deps carried:
#   bash tests/gpu/device_session.sh build test      # CUDA build; NCCL dist tests; ViT-B parity
#   bash tests/gpu/device_session.sh bench1 bench2   # ViT-B/16 benchmarks on 1 and 2 GPUs vs timm
# Set COLO_COMMIT=<commit> in the call: the copy of the tree sent to the GPU machine may carry stale
# git metadata, and the benchmark records name the commit they measured.
# Stages (any order): build test bench1 bench2 ctas zero2 scaling-base scaling-large profile profile2.
set -uo pipefail
OUT=${OUT:-/tmp/colo-out}
LOGS=/tmp/colo-logs/$(date +%H%M%S)
mkdir -p "$OUT" "$LOGS"
trap 'tar czf "$OUT/logs-$(basename "$LOGS").tgz" -C "$LOGS" . ; cp "$LOGS/summary.txt" "$OUT/" 2>/dev/null; cat "$LOGS"/b*/table.md 2>/dev/null' EXIT
if [ ! -d /opt/colo-deps ]; then bash .gpu-deps/unpack-deps.sh >"$LOGS/deps.log" 2>&1; fi
source /opt/colo-deps/env.sh
nvidia-smi -L >"$LOGS/gpus.txt" 2>&1
ngpu=$(nvidia-smi -L | wc -l)
# Also straight into $OUT, so that a run cut off by the time limit still reports what it did.
note() { echo "$*" | tee -a "$LOGS/summary.txt" >>"$OUT/progress.txt"; }

for stage in "$@"; do
  start=$SECONDS
  case "$stage" in
    build)
      {
        cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOLO_BUILD_TESTS=ON -DCOLO_BUILD_BENCHMARKS=ON &&
          cmake --build build-gpu -j "$(nproc)"
      } >"$LOGS/build.log" 2>&1
      note "build rc=$? ($((SECONDS - start)) s)"
      grep -E "error|FAILED" "$LOGS/build.log" | head -20 | tee -a "$LOGS/summary.txt"
      ;;
    test)
      # Distributed tests over NCCL, one process per GPU.
      COLO_TIMEOUT_MS=60000 timeout 240 build-gpu/bin/colo-run --nproc-per-node "$ngpu" --rdzv-file auto \
        build-gpu/bin/colo_dist_tests >"$LOGS/dist_tests.log" 2>&1
      note "dist tests on $ngpu GPUs rc=$? ($((SECONDS - start)) s)"
      grep -E "FAILED|PASSED|SKIPPED|Failure" "$LOGS/dist_tests.log" | head -30 >>"$LOGS/summary.txt"
      # ViT-B/16 parity with timm (fp32 logits 1e-5, gradients 1e-4), on CUDA.
      (cd build-gpu && timeout 240 ctest -L gpu --output-on-failure -V) >"$LOGS/parity.log" 2>&1
      note "gpu parity rc=$? ($((SECONDS - start)) s)"
      grep -E "colo - timm|loss: colo|Passed|Failed" "$LOGS/parity.log" | head -20 >>"$LOGS/summary.txt"
      ;;
    bench1 | bench2)
      # ViT-B/16 224², bf16, batch 256 per GPU, synthetic data: colo torch_ddp vs timm (bench2: 2 GPUs).
      common=(--build-dir build-gpu --model base --batch-size 256 --precision bf16 --warmup-steps 10 --steps 30)
      if [ "$stage" = bench1 ]; then
        timeout 280 python3 benchmarks/peers/run_all.py --nproc 1 "${common[@]}" --plugins torch_ddp \
          --peers eager compile --timeout 250 --out "$LOGS/b1" >"$LOGS/bench1.log" 2>&1
      else
        timeout 280 python3 benchmarks/peers/run_all.py --nproc 2 "${common[@]}" --plugins torch_ddp torch_ddp:bucket_cap_mb=100 \
          --peers ddp --timeout 250 --out "$LOGS/b2" >"$LOGS/bench2.log" 2>&1
      fi
      note "$stage rc=$? ($((SECONDS - start)) s)"
      ;;
    ctas)
      # NCCL CTAs (SMs) taken by the gradient all-reduce while it overlaps backward: ViT-B/16, 2 GPUs.
      for c in 4 8 16; do
        NCCL_MAX_CTAS=$c timeout 100 python3 benchmarks/peers/run_all.py --nproc 2 --build-dir build-gpu --model base \
          --batch-size 256 --precision bf16 --warmup-steps 10 --steps 30 --plugins torch_ddp --peers \
          --timeout 90 --out "$LOGS/ctas$c" >"$LOGS/ctas$c.log" 2>&1
        note "NCCL_MAX_CTAS=$c rc=$?: $(grep -h '"images_per_s"' "$LOGS"/ctas$c/*.json | head -1)"
      done
      ;;
    zero2)
      # ViT-L/16 bf16, batch 128 per GPU, 2 GPUs: low_level_zero stages vs PyTorch DDP and FSDP2.
      timeout 420 python3 benchmarks/peers/run_all.py --nproc 2 --build-dir build-gpu --model large --batch-size 128 \
        --precision bf16 --warmup-steps 8 --steps 20 --peak-seconds 1 \
        --plugins torch_ddp low_level_zero:stage=1 low_level_zero:stage=2 low_level_zero:stage=2,cpu_offload=true \
        --peers ddp fsdp2 --timeout 150 --out "$LOGS/bz" >"$LOGS/zero2.log" 2>&1
      note "zero2 rc=$? ($((SECONDS - start)) s)"
      ;;
    scaling-base | scaling-large)
      # Scaling (issue 5): torch_ddp and low_level_zero 1/2 at 1, 2, 4, ... GPUs, vs DDP and FSDP2.
      model=${stage#scaling-}
      batch=256 steps=12
      [ "$model" = large ] && batch=128 steps=8
      n=1
      # COLO_SCALING_MAX_GPUS=1 re-runs only the 1-GPU baselines.
      while [ "$n" -le "${COLO_SCALING_MAX_GPUS:-$ngpu}" ]; do
        timeout 200 python3 benchmarks/peers/run_all.py --nproc "$n" --build-dir build-gpu --model "$model" \
          --batch-size "$batch" --precision bf16 --warmup-steps 4 --steps "$steps" --peak-seconds 0.3 \
          --peak-matmul-size 4096 --plugins torch_ddp low_level_zero:stage=1 low_level_zero:stage=2 \
          --peers ddp fsdp2 --timeout 90 --out "$LOGS/s_${model}_$n" >"$LOGS/scaling_${model}_$n.log" 2>&1
        note "scaling $model x$n rc=$? ($((SECONDS - start)) s)"
        grep -h -A8 '^| run' "$LOGS/s_${model}_$n/table.md" | grep '^| [ct]' | tee -a "$LOGS/summary.txt" >>"$OUT/progress.txt"
        n=$((n * 2))
      done
      ;;
    profile)
      # Kernel-level comparison of one ViT-B/16 bf16 step (batch 256): colo torch_ddp vs timm eager and FSDP2.
      common=(--model base --batch-size 256 --precision bf16 --warmup-steps 10 --steps 20)
      timeout 120 build-gpu/bin/colo-run --nproc-per-node 1 build-gpu/bin/colo_vit_bench --plugin torch_ddp \
        "${common[@]}" --profile "$LOGS/colo_trace.json" --json "$LOGS/colo_profiled.json" >"$LOGS/profile_colo.log" 2>&1
      note "profile colo rc=$?"
      timeout 150 python3 benchmarks/peers/timm_train_bench.py --mode eager "${common[@]}" \
        --profile "$LOGS/timm_trace.json" --json "$LOGS/timm_profiled.json" >"$LOGS/profile_timm.log" 2>&1
      note "profile timm rc=$?"
      # FSDP2's mixed precision is pure-bf16 compute like colo's, and it is the fastest peer on one GPU.
      timeout 150 python3 -m torch.distributed.run --standalone --nproc-per-node 1 \
        benchmarks/peers/timm_train_bench.py --mode fsdp2 "${common[@]}" --profile "$LOGS/fsdp2_trace.json" \
        --json "$LOGS/fsdp2_profiled.json" >"$LOGS/profile_fsdp2.log" 2>&1
      note "profile fsdp2 rc=$?"
      python3 benchmarks/peers/kernel_summary.py colo="$LOGS/colo_trace.json" timm="$LOGS/timm_trace.json" \
        fsdp2="$LOGS/fsdp2_trace.json" --top 30 >"$LOGS/kernels.md" 2>&1
      grep -h '"images_per_s"' "$LOGS"/*_profiled.json | tee -a "$LOGS/summary.txt"
      cp "$LOGS/kernels.md" "$OUT/"
      rm -f "$LOGS"/*_trace.json
      note "profile done ($((SECONDS - start)) s)"
      ;;
    profile2)
      # The same on 2 GPUs: colo torch_ddp vs PyTorch DDP (traces of rank 0), to see
      # what data parallelism adds to the step (NCCL kernels, and compute slowed by sharing SMs with them).
      common=(--model base --batch-size 256 --precision bf16 --warmup-steps 10 --steps 20)
      timeout 120 build-gpu/bin/colo-run --nproc-per-node 2 build-gpu/bin/colo_vit_bench --plugin torch_ddp \
        "${common[@]}" --profile "$LOGS/colo_ddp_trace.json" --json "$LOGS/colo_ddp_profiled.json" >"$LOGS/profile2_colo.log" 2>&1
      note "profile2 colo rc=$?"
      timeout 150 python3 -m torch.distributed.run --standalone --nproc-per-node 2 \
        benchmarks/peers/timm_train_bench.py --mode ddp "${common[@]}" --profile "$LOGS/timm_ddp_trace.json" \
        --json "$LOGS/timm_ddp_profiled.json" >"$LOGS/profile2_timm.log" 2>&1
      note "profile2 timm ddp rc=$?"
      python3 benchmarks/peers/kernel_summary.py colo_ddp="$LOGS/colo_ddp_trace.json" timm_ddp="$LOGS/timm_ddp_trace.json" \
        --top 30 >"$LOGS/kernels2.md" 2>&1
      grep -h '"images_per_s"' "$LOGS"/*ddp_profiled.json | tee -a "$LOGS/summary.txt"
      cp "$LOGS/kernels2.md" "$OUT/"
      rm -f "$LOGS"/*_trace.json
      note "profile2 done ($((SECONDS - start)) s)"
      ;;
    *) note "unknown stage $stage" ;;
  esac
done
exit 0
