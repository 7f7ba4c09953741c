#!/usr/bin/env bash
# GPU-machine session (device tool), in stages so that each call stays under the 10-minute limit
# while the warm machine keeps build-gpu/ between calls. Logs and JSON records go to $OUT as
# one archive (the device returns only a few files). From the repo root, .gpu-deps carried:
#   bash tests/gpu/device_session.sh build test      # CUDA build; NCCL dist tests; ViT-B parity
#   bash tests/gpu/device_session.sh bench1 bench2   # ViT-B/16 benchmarks on 1 and 2 GPUs vs timm
# Set COLO_COMMIT=<commit> in the call: the copy of the tree sent to the GPU machine may carry stale
# git metadata, and the benchmark records name the commit they measured.
# Stages (any order): build test bench1 bench2 ctas zero2 scaling-base scaling-large profile profile2 per-gpu dp-overhead
# peer-scaling profile-peers overlap-probe exit-loop pipeline-overhead shardformer-tp1 build-gemini
# gemini-large gemini-6b peer-6b build-imagefolder image-folder build-fp8 fp8 main-fp8 build-vit-bench fp8-peers profile1 fusion-probe
# build-fused fused-tests fused-ab fused-peers build-multi two-gpu-pp two-gpu-tp two-gpu-faults small-micro-profile build-graphs graphs graphs-profile
# build-graphs-pp graphs-pp two-gpu-pp-graphs four-gpu pp-debug build-onegpu one-gpu-ranks one-gpu-layouts (several ranks on one GPU over Gloo: tests/gpu/README.md)
# elastic-gpu (colo-run --elastic on every GPU, issue 36) elastic-nodes (--elastic across two one-GPU nodes) save-stall-6b (the 6.45B ViT's save stall under gemini, issue 36) profile-stability (colo-plan profile's run-to-run spread)
# planner-error (the planner against measurement: COLO_PLANNER_PRESETS="gpu2 gpu1 cpu") restart-nccl save-stall
# build-base engine-room (a change's A/B: the tree before it, from .gpu-base.tgz, against this one).
# build-nvjpeg nvjpeg (issue 38: ImageFolder's nvJPEG decoder: GPU tests, then ViT-B/16 from JPEGs with --decoder nvjpeg
# and 2 loader threads against synthetic data and the CPU decoder). nvJPEG comes from the CUDA toolkit where it has one,
# else from PyPI's wheel in .gpu-deps: python3 -m pip download --no-deps -d .gpu-deps nvidia-nvjpeg==13.3.2.43
# The image decoders (issue 23) come from Debian too: fetch them into .gpu-deps with
#   bash ../shared/gpu/fetch-deps.sh .gpu-deps libjpeg62-turbo libjpeg62-turbo-dev libpng16-16 libpng-dev
# The fp8-peers stage needs torchao's wheel there too (the GPU machine has no network):
#   python3 -m pip download torchao --no-deps -d .gpu-deps
set -uo pipefail
OUT=${OUT:-/tmp/colo-out}
LOGS=/tmp/colo-logs/$(date +%H%M%S)
mkdir -p "$OUT" "$LOGS"
trap 'tar czf "$OUT/logs-$(basename "$LOGS").tgz" -C "$LOGS" . ; cp "$LOGS/summary.txt" "$OUT/" 2>/dev/null; cat "$LOGS"/b*/table.md 2>/dev/null' EXIT
# Unpacked again when the image decoders' headers are missing (a machine set up before they were carried).
if [ ! -f /opt/colo-deps/env.sh ] || [ ! -f /opt/colo-deps/usr/include/jpeglib.h ]; then
  bash .gpu-deps/unpack-deps.sh >"$LOGS/deps.log" 2>&1
fi
source /opt/colo-deps/env.sh
nvidia-smi -L >"$LOGS/gpus.txt" 2>&1
ngpu=$(nvidia-smi -L | wc -l)
# Also straight into $OUT, so that a run cut off by the time limit still reports what it did.
note() { echo "$*" | tee -a "$LOGS/summary.txt" >>"$OUT/progress.txt"; }

# build_release_targets STAGE TARGET...: a Release build of build-gpu/ with tests and benchmarks
# configured, only TARGETs built; the log in build.log, errors in the summary.
build_release_targets() {
  local stage=$1
  shift
  {
    cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOLO_BUILD_TESTS=ON -DCOLO_BUILD_BENCHMARKS=ON &&
      cmake --build build-gpu -j "$(nproc)" --target "$@"
  } >"$LOGS/build.log" 2>&1
  note "$stage rc=$? ($((SECONDS - start)) s)"
  grep -E "error|FAILED|Could NOT" "$LOGS/build.log" | head -20 | tee -a "$LOGS/summary.txt"
}

# ViT-B/16 bf16, batch 256 per GPU, torch_ddp, without the peak-matmul measurement: the per-GPU and
# data-parallel-overhead stages (add --warmup-steps/--steps and --json).
vitb_ddp=(build-gpu/bin/colo_vit_bench --plugin torch_ddp --model base --batch-size 256 --precision bf16 --peak-tflops 1)

# with_clocks NAME COMMAND...: runs COMMAND while sampling every GPU's SM clock, power, power limit,
# temperature, utilisation and (where the driver reports it) whether the power cap holds the clock back;
# prints per GPU the means over the busy samples (utilisation >= 90 %).
clock_fields=index,utilization.gpu,clocks.sm,power.draw,power.limit,temperature.gpu
if nvidia-smi --query-gpu=clocks_event_reasons.sw_power_cap --format=csv,noheader >/dev/null 2>&1; then
  clock_fields+=,clocks_event_reasons.sw_power_cap
fi
with_clocks() {
  local name=$1
  shift
  nvidia-smi --query-gpu="$clock_fields" --format=csv,noheader,nounits -lms 200 >"$LOGS/clocks_$name.csv" 2>/dev/null &
  local sampler=$!
  "$@"
  local rc=$?
  kill "$sampler" 2>/dev/null
  wait "$sampler" 2>/dev/null
  awk -F', *' -v known="${clock_fields##*,}" '$2 >= 90 {n[$1]++; c[$1] += $3; p[$1] += $4; l[$1] = $5; t[$1] += $6; if ($7 == "Active") cap[$1]++}
    END {for (g in n) printf "GPU %s: %.0f MHz %.0f W of %.0f W %.0f C, power-capped in %s of %d samples; ", g, c[g] / n[g],
      p[g] / n[g], l[g], t[g] / n[g], known == "clocks_event_reasons.sw_power_cap" ? cap[g] + 0 : "(not reported)", n[g]}' \
    "$LOGS/clocks_$name.csv"
  return $rc
}

# profile_runs NPROC OUTPUT.md LABEL:MODE...: one traced ViT-B/16 bf16 run per LABEL:MODE (colo plugin
# for the label colo*, timm_train_bench.py mode otherwise, which may carry options: "ddp --compile"),
# then kernel_summary.py over the traces.
profile_runs() {
  local nproc=$1 report=$2 start=$SECONDS
  shift 2
  local common=(--model base --batch-size 256 --precision bf16 --warmup-steps 10 --steps 20) traces=()
  for run in "$@"; do
    local label=${run%%:*} mode=${run#*:}
    if [[ $label == colo* ]]; then
      timeout 120 build-gpu/bin/colo-run --nproc-per-node "$nproc" build-gpu/bin/colo_vit_bench --plugin "$mode" \
        "${common[@]}" --profile "$LOGS/${label}_trace.json" --json "$LOGS/${label}_profiled.json" \
        >"$LOGS/profile_$label.log" 2>&1
    else
      timeout 150 python3 -m torch.distributed.run --standalone --nproc-per-node "$nproc" \
        benchmarks/peers/timm_train_bench.py --mode $mode "${common[@]}" --profile "$LOGS/${label}_trace.json" \
        --json "$LOGS/${label}_profiled.json" >"$LOGS/profile_$label.log" 2>&1
    fi
    note "profile $label on $nproc GPU(s) rc=$?"
    traces+=("$label=$LOGS/${label}_trace.json")
  done
  # Rank 1's traces too, where there is one (a slower rank sets the pace of all).
  for run in "$@"; do
    local label=${run%%:*}
    [ -f "$LOGS/${label}_trace.rank1.json" ] && traces+=("${label}_rank1=$LOGS/${label}_trace.rank1.json")
  done
  python3 benchmarks/peers/kernel_summary.py "${traces[@]}" --top 30 >"$LOGS/$report" 2>&1
  grep -h '"images_per_s"' "$LOGS"/*_profiled.json | tee -a "$LOGS/summary.txt"
  cp "$LOGS/$report" "$OUT/"
  rm -f "$LOGS"/*_trace*.json "$LOGS"/*_profiled.json
  note "$report done ($((SECONDS - start)) s)"
}

# logged LOG COMMAND...: COMMAND with its output in LOG (for with_clocks, whose own output is the clocks).
logged() {
  local log=$1
  shift
  "$@" >"$log" 2>&1
}

# split_run ENTRY: one ';'-separated entry of COLO_DP_RUNS / COLO_PROBE_RUNS into envs (its VAR=value
# words), args (its --options, written --name=value: words are split on spaces) and tag (a
# file-name-safe label); "-" alone is the plain run.
split_run() {
  envs=() args=()
  for word in $1; do
    if [[ $word == --* ]]; then args+=("$word"); elif [[ $word != - ]]; then envs+=("$word"); fi
  done
  tag=$(echo "$1" | tr -c 'A-Za-z0-9=\n' '_')
}

# Every later process prints its stack if it segfaults (2026-11-22, cbcf300: one rank of a
# 4-GPU low_level_zero run died of SIGSEGV after its results were written, once in ~30 runs).
segv_backtrace() { [ -f build-gpu/libsegv_backtrace.so ] && export LD_PRELOAD=$PWD/build-gpu/libsegv_backtrace.so; }
segv_backtrace

for stage in "$@"; do
  start=$SECONDS
  [ "$stage" = build ] || segv_backtrace
  case "$stage" in
    build)
      {
        cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOLO_BUILD_TESTS=ON -DCOLO_BUILD_BENCHMARKS=ON &&
          cmake --build build-gpu -j "$(nproc)"
      } >"$LOGS/build.log" 2>&1
      note "build rc=$? ($((SECONDS - start)) s)"
      grep -E "error|FAILED" "$LOGS/build.log" | head -20 | tee -a "$LOGS/summary.txt"
      gcc -shared -fPIC -O1 -o build-gpu/libsegv_backtrace.so tests/gpu/segv_backtrace.c >>"$LOGS/build.log" 2>&1
      ;;
    test)
      # Distributed tests over NCCL, one process per GPU.
      # The whole suite takes ~270 s on four GPUs (2026-11-26; communicator set-up grows with the ranks).
      # COLO_DIST_FILTER (a --gtest_filter) runs some of it, e.g. 'Engines.*' after a fix there.
      COLO_TIMEOUT_MS=60000 timeout "${COLO_TEST_TIMEOUT:-$((ngpu > 2 ? 450 : 240))}" build-gpu/bin/colo-run --nproc-per-node "$ngpu" --rdzv-file auto \
        build-gpu/bin/colo_dist_tests --gtest_filter="${COLO_DIST_FILTER:-*}" >"$LOGS/dist_tests.log" 2>&1
      note "dist tests on $ngpu GPUs (filter ${COLO_DIST_FILTER:-*}) rc=$? ($((SECONDS - start)) s)"
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
        timeout 280 python3 benchmarks/peers/run_all.py --nproc 2 "${common[@]}" --plugins torch_ddp torch_ddp:overlap_communication=false \
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
      # More steps where device time allows: the multi-GPU step means of a 12-step run sit 1-2 ms
      # above their medians (one or two slow early steps), which moves the efficiencies by ~2 %.
      steps=${COLO_SCALING_STEPS:-$steps}
      warmup=${COLO_SCALING_WARMUP:-4}
      # GPU counts: 1, 2, 4, ... up to the GPUs present, or the list in COLO_SCALING_GPUS (e.g. "1 4"
      # when device time is short; "1" re-runs only the 1-GPU baselines).
      counts=${COLO_SCALING_GPUS:-}
      if [ -z "$counts" ]; then
        for ((n = 1; n <= ngpu; n *= 2)); do counts+=" $n"; done
      fi
      for n in $counts; do
        timeout 200 python3 benchmarks/peers/run_all.py --nproc "$n" --build-dir build-gpu --model "$model" \
          --batch-size "$batch" --precision bf16 --warmup-steps "$warmup" --steps "$steps" --peak-seconds 0.3 \
          --peak-matmul-size 4096 --plugins torch_ddp low_level_zero:stage=1 low_level_zero:stage=2 \
          --peers ddp fsdp2 --timeout 90 --out "$LOGS/s_${model}_$n" >"$LOGS/scaling_${model}_$n.log" 2>&1
        note "scaling $model x$n rc=$? ($((SECONDS - start)) s)"
        grep -h -A8 '^| run' "$LOGS/s_${model}_$n/table.md" | grep '^| [ct]' | tee -a "$LOGS/summary.txt" >>"$OUT/progress.txt"
      done
      ;;
    profile)
      # Kernel-level comparison of one ViT-B/16 bf16 step (batch 256) on 1 GPU: colo torch_ddp vs timm
      # eager and FSDP2 (FSDP2's mixed precision is pure-bf16 compute like colo's).
      profile_runs 1 kernels.md "colo:torch_ddp" "timm:eager" "fsdp2:fsdp2"
      ;;
    build-fused)
      # Issue 24's fused kernels: what fused-tests and fused-ab run, and, when the tree of an earlier commit
      # is carried in .ab-base/ (git archive COMMIT | tar -x -C .ab-base), its libcolo_core in build-base/ for
      # a same-machine A/B (LD_LIBRARY_PATH is searched before the binaries' RUNPATH).
      {
        cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOLO_BUILD_TESTS=ON -DCOLO_BUILD_BENCHMARKS=ON &&
          cmake --build build-gpu -j "$(nproc)" --target colo-run colo_vit_bench colo_gpu_kernel_tests \
            colo_gpu_vit_parity colo_plugin_torch_ddp
      } >"$LOGS/build.log" 2>&1
      note "build-fused rc=$? ($((SECONDS - start)) s)"
      grep -E "error|FAILED|Could NOT" "$LOGS/build.log" | head -20 | tee -a "$LOGS/summary.txt"
      if [ -d .ab-base ]; then
        {
          cmake -S .ab-base -B build-base -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOLO_BUILD_TESTS=OFF \
            -DCOLO_BUILD_BENCHMARKS=OFF && cmake --build build-base -j "$(nproc)" --target colo_core
        } >"$LOGS/build_base.log" 2>&1
        note "build-base rc=$? ($((SECONDS - start)) s): $(cat .ab-base/COMMIT 2>/dev/null)"
        grep -E "error|FAILED" "$LOGS/build_base.log" | head -10 | tee -a "$LOGS/summary.txt"
      fi
      ;;
    fused-tests)
      # The fused kernels against fp64 and ATen (with their timings beside ATen's), then timm parity on CUDA.
      build-gpu/bin/colo_gpu_kernel_tests >"$LOGS/kernel_tests.log" 2>&1
      note "kernel tests rc=$?: $(grep -cE '^\[       OK' "$LOGS/kernel_tests.log") passed, $(grep -cE '^\[  FAILED  \] [A-Z]' "$LOGS/kernel_tests.log") failed"
      grep -E "Failure|Expected|Which is|actual|TIMING|FAILED  \]" "$LOGS/kernel_tests.log" | head -40 | tee -a "$LOGS/summary.txt" >>"$OUT/progress.txt"
      (cd build-gpu && timeout 240 ctest -L gpu -R 'oracle|VitBaseCudaParity' --output-on-failure -V) >"$LOGS/parity.log" 2>&1
      note "gpu parity rc=$? ($((SECONDS - start)) s)"
      grep -E "colo - timm|loss: colo|Passed|Failed|worst" "$LOGS/parity.log" | head -20 | tee -a "$LOGS/summary.txt" >>"$OUT/progress.txt"
      ;;
    fused-ab)
      # colo torch_ddp with the fused kernels (this tree) and without (build-base's libcolo_core), alternately
      # COLO_AB_REPEATS times (default 2), on ViT-B/16 batch 256 and ViT-L/16 batch 128 (COLO_AB_MODELS), bf16.
      note "base library: $(LD_LIBRARY_PATH=$PWD/build-base/lib LD_DEBUG=libs build-gpu/bin/colo_vit_bench --help 2>&1 | grep -o 'init: [^ ]*libcolo_core.so' | head -1)"
      for model in ${COLO_AB_MODELS:-base large}; do
        batch=256
        [ "$model" = large ] && batch=128
        for ((i = 0; i < ${COLO_AB_REPEATS:-2}; i++)); do
          for v in fused $([ -f build-base/lib/libcolo_core.so ] && echo base); do
            lib=""
            [ "$v" = base ] && lib=$PWD/build-base/lib
            LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} timeout 150 build-gpu/bin/colo-run --nproc-per-node 1 \
              build-gpu/bin/colo_vit_bench --plugin torch_ddp --model "$model" --batch-size "$batch" --precision bf16 \
              --warmup-steps 10 --steps "${COLO_AB_STEPS:-40}" --peak-tflops 1 --json "$LOGS/ab_${model}_${v}_$i.json" \
              >"$LOGS/ab_${model}_${v}_$i.log" 2>&1
            note "$model $v run $i rc=$?: $(grep -ho '"images_per_s": *[0-9.]*' "$LOGS/ab_${model}_${v}_$i.json" 2>/dev/null | head -1) $(grep -ho '"peak_mem_gib": *[0-9.]*' "$LOGS/ab_${model}_${v}_$i.json" 2>/dev/null | head -1)"
          done
        done
      done
      ;;
    fused-peers)
      # The peers in the same call: timm under torch.compile (autocast bf16), plus one run per variant
      # in COLO_PEER_EXTRA, separated by ';' (e.g. "--param-dtype bf16;--compile-mode max-autotune"),
      # each limited to COLO_PEER_TIMEOUT seconds (default 240; max-autotune compiles for minutes);
      # with a "--param-dtype bf16" variant also colo with master_weights=false, on COLO_AB_MODELS.
      IFS=';' read -ra peer_extras <<<"${COLO_PEER_EXTRA:-}"
      for model in ${COLO_AB_MODELS:-base large}; do
        batch=256
        [ "$model" = large ] && batch=128
        for extra in "" "${peer_extras[@]}"; do
          tag=$(echo "timm_${model}_$extra" | tr -c 'A-Za-z0-9_\n' '_')
          timeout "${COLO_PEER_TIMEOUT:-240}" python3 benchmarks/peers/timm_train_bench.py --mode compile --model "$model" --batch-size "$batch" \
            --precision bf16 --warmup-steps 10 --steps "${COLO_AB_STEPS:-40}" --peak-tflops 1 $extra --commit "${COLO_COMMIT:-}" \
            --json "$LOGS/$tag.json" >"$LOGS/$tag.log" 2>&1
          note "timm compile $model $extra rc=$?: $(grep -ho '"images_per_s": *[0-9.]*' "$LOGS/$tag.json" 2>/dev/null | head -1) $(grep -ho '"peak_mem_gib": *[0-9.]*' "$LOGS/$tag.json" 2>/dev/null | head -1)"
          grep -E "Error|error" "$LOGS/$tag.log" | tail -3 >>"$LOGS/summary.txt"
        done
        if [[ "${COLO_PEER_EXTRA:-}" == *"--param-dtype bf16"* ]]; then
          timeout 150 build-gpu/bin/colo-run --nproc-per-node 1 build-gpu/bin/colo_vit_bench --plugin torch_ddp \
            --plugin-opt master_weights=false --model "$model" --batch-size "$batch" --precision bf16 --warmup-steps 10 \
            --steps "${COLO_AB_STEPS:-40}" --peak-tflops 1 --json "$LOGS/colo_${model}_mwfalse.json" >"$LOGS/colo_${model}_mwfalse.log" 2>&1
          note "colo $model master_weights=false rc=$?: $(grep -ho '"images_per_s": *[0-9.]*' "$LOGS/colo_${model}_mwfalse.json" 2>/dev/null | head -1) $(grep -ho '"peak_mem_gib": *[0-9.]*' "$LOGS/colo_${model}_mwfalse.json" 2>/dev/null | head -1)"
        fi
      done
      ;;
    profile1)
      # colo's 1-GPU step beside compiled timm's (autocast), kernel by kernel (issue 24's fusion work).
      profile_runs 1 kernels1.md "colo:torch_ddp" "timmc:ddp --compile"
      ;;
    fusion-probe)
      # What each non-matmul ATen kernel of the step costs beside its Inductor-fused twin and its memory floor.
      for model in ${COLO_PROBE_MODELS:-base large}; do
        timeout 240 python3 benchmarks/peers/fusion_probe.py --model "$model" >"$LOGS/fusion_probe_$model.log" 2>&1
        note "fusion probe $model rc=$?"
        grep PROBE "$LOGS/fusion_probe_$model.log" | tee -a "$LOGS/summary.txt" >>"$OUT/progress.txt"
      done
      ;;
    profile2)
      # The same on 2 GPUs (traces of rank 0): what data parallelism adds to the step (NCCL kernels,
      # compute slowed by sharing the GPU with them, idle gaps).
      profile_runs 2 kernels2.md "colo_ddp:torch_ddp" "timm_ddp:ddp"
      ;;
    profile-peers)
      # The 2-GPU step of colo beside PyTorch's DDP over torch.compile'd pure-bf16 timm (the peer that
      # moves colo's number of gradient bytes in a shorter step, stage peer-scaling).
      profile_runs 2 kernels_peers.md "colo_ddp:torch_ddp" "timm_ddpc:ddp --compile --param-dtype bf16"
      ;;
    pipeline-overhead)
      # The pipeline interpreter's own cost on one GPU (issue 19): ViT-B/16 bf16, batch 256, as 8
      # microbatches of 32 through hybrid_parallel's execute_pipeline (pp_size 1: no communication,
      # the runner, its schedule and the deferred dp reduction only) against torch_ddp running the
      # same 8 micro-batches under no_sync, alternately, COLO_PIPE_REPEATS times each (default 3),
      # COLO_PIPE_STEPS timed steps a run (default 40).
      common=(--model base --batch-size 256 --precision bf16 --warmup-steps 10 --steps "${COLO_PIPE_STEPS:-40}"
        --peak-tflops 1)
      for ((i = 0; i < ${COLO_PIPE_REPEATS:-3}; i++)); do
        for kind in ddp8 pipe8; do
          if [ $kind = ddp8 ]; then
            cmd=(build-gpu/bin/colo_vit_bench --plugin torch_ddp --grad-accum 8)
          else
            cmd=(build-gpu/bin/colo_vit_bench --plugin hybrid_parallel --plugin-opt num_microbatches=8)
          fi
          timeout 150 build-gpu/bin/colo-run --nproc-per-node 1 "${cmd[@]}" "${common[@]}" \
            --json "$LOGS/${kind}_$i.json" >"$LOGS/${kind}_$i.log" 2>&1
          note "$kind run $i rc=$?: $(grep -ho '"images_per_s": *[0-9.]*' "$LOGS/${kind}_$i.json" 2>/dev/null)"
        done
      done
      ;;
    shardformer-tp1)
      # The shardformer's cost when nothing is split (issue 20): ViT-B/16 bf16, batch 256, one GPU,
      # hybrid_parallel at tp_size 1 (the ViT policy still swaps in the parallel linears, whose
      # mappings then do nothing) against torch_ddp, alternately, COLO_TP1_REPEATS times each
      # (default 5), COLO_TP1_STEPS timed steps a run (default 40).
      common=(--model base --batch-size 256 --precision bf16 --warmup-steps 10 --steps "${COLO_TP1_STEPS:-40}"
        --peak-tflops 1)
      for ((i = 0; i < ${COLO_TP1_REPEATS:-5}; i++)); do
        for kind in ddp tp1; do
          if [ $kind = ddp ]; then plugin=torch_ddp; else plugin=hybrid_parallel; fi
          timeout 150 build-gpu/bin/colo-run --nproc-per-node 1 build-gpu/bin/colo_vit_bench --plugin $plugin \
            "${common[@]}" --json "$LOGS/${kind}_$i.json" >"$LOGS/${kind}_$i.log" 2>&1
          note "$kind run $i rc=$?: $(grep -ho '"images_per_s": *[0-9.]*' "$LOGS/${kind}_$i.json" 2>/dev/null) $(grep -ho '"peak_mem_gib": *[0-9.]*' "$LOGS/${kind}_$i.json" 2>/dev/null)"
        done
      done
      ;;
    build-gemini)
      # Only what the gemini stages run (a full build takes most of a call), then the GPU tests of
      # the host<->device staging gemini and low_level_zero's offload use.
      {
        cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOLO_BUILD_TESTS=ON -DCOLO_BUILD_BENCHMARKS=ON &&
          cmake --build build-gpu -j "$(nproc)" --target colo-run colo_vit_bench colo_plugin_gemini \
            colo_plugin_low_level_zero colo_plugin_torch_ddp colo_gpu_kernel_tests
      } >"$LOGS/build.log" 2>&1
      note "build-gemini rc=$? ($((SECONDS - start)) s)"
      grep -E "error|FAILED" "$LOGS/build.log" | head -20 | tee -a "$LOGS/summary.txt"
      timeout 120 build-gpu/bin/colo_gpu_kernel_tests --gtest_filter='PinnedStaging*:CopyStream*' >"$LOGS/staging_tests.log" 2>&1
      note "PinnedStaging/CopyStream GPU tests rc=$?: $(grep -E '^\[  (PASSED|FAILED)' "$LOGS/staging_tests.log" | tr '\n' ' ')"
      ;;
    gemini-large)
      # Issue 22 on one GPU: ViT-L/16 bf16 batch 128, low_level_zero stage 2 against gemini auto
      # (which must keep everything that fits on the device), alternating, COLO_GEMINI_ROUNDS rounds.
      common=(--model large --batch-size 128 --precision bf16 --warmup-steps 5 --steps "${COLO_GEMINI_STEPS:-20}"
        --peak-tflops "${COLO_PEAK_TFLOPS:-0}")
      for ((round = 1; round <= ${COLO_GEMINI_ROUNDS:-2}; round++)); do
        for run in "lowzero2:low_level_zero:stage=2" "gemini_auto:gemini:placement_policy=auto"; do
          IFS=: read -r tag plugin opt <<<"$run"
          tag=${tag}_$round
          timeout 200 build-gpu/bin/colo-run --nproc-per-node 1 build-gpu/bin/colo_vit_bench --plugin "$plugin" \
            --plugin-opt "$opt" "${common[@]}" --json "$LOGS/$tag.json" >"$LOGS/$tag.log" 2>&1
          note "$tag rc=$?: $(grep -ho '"images_per_s": *[0-9.]*' "$LOGS/$tag.json" 2>/dev/null) $(grep -ho '"peak_mem_gib": *[0-9.]*' "$LOGS/$tag.json" 2>/dev/null) $(grep -ho '"mfu": *[0-9.]*' "$LOGS/$tag.json" 2>/dev/null) $(grep -h 'planned' "$LOGS/$tag.log")"
          grep -v '^\s' "$LOGS/$tag.log" | tail -3 >>"$LOGS/summary.txt"
        done
      done
      ;;
    gemini-6b)
      # The seed's 6.45B-parameter ViT (hidden 4096, depth 32, 64 heads, MLP ratio 4, 224², patch 16),
      # bf16, one GPU. COLO_6B_RUNS: space-separated PLUGIN:OPT,OPT...:ARG,ARG... entries (benchmark
      # options in the third field, e.g. --activation-checkpointing,--grad-accum=16); COLO_6B_BATCH is
      # the step's batch (split by --grad-accum).
      big=(--model large --embed-dim 4096 --depth 32 --num-heads 64 --mlp-ratio 4 --precision bf16
        --batch-size "${COLO_6B_BATCH:-256}" --warmup-steps "${COLO_6B_WARMUP:-1}" --steps "${COLO_6B_STEPS:-3}"
        --peak-tflops "${COLO_PEAK_TFLOPS:-0}")
      n=0
      for run in ${COLO_6B_RUNS:-gemini:placement_policy=auto:--activation-checkpointing,--grad-accum=16}; do
        IFS=: read -r plugin opts extras <<<"$run"
        n=$((n + 1)) tag=6b_${plugin}_$n
        plugin_opts=() extra=()
        IFS=, read -ra pairs <<<"$opts"
        for pair in "${pairs[@]}"; do plugin_opts+=(--plugin-opt "$pair"); done
        IFS=, read -ra extra <<<"$extras"
        /usr/bin/time -v timeout "${COLO_6B_TIMEOUT:-300}" build-gpu/bin/colo-run --nproc-per-node "${COLO_6B_NPROC:-1}" build-gpu/bin/colo_vit_bench \
          --plugin "$plugin" "${plugin_opts[@]}" "${big[@]}" "${extra[@]}" --json "$LOGS/$tag.json" >"$LOGS/$tag.log" 2>&1
        note "$tag ($run) rc=$?: $(grep -ho '"images_per_s": *[0-9.]*' "$LOGS/$tag.json" 2>/dev/null) $(grep -ho '"peak_mem_gib": *[0-9.]*' "$LOGS/$tag.json" 2>/dev/null) $(grep -ho '"mfu": *[0-9.]*' "$LOGS/$tag.json" 2>/dev/null) $(grep -h 'planned' "$LOGS/$tag.log") host maxrss $(grep -o 'Maximum resident set size.*' "$LOGS/$tag.log")"
        grep -v '^\s' "$LOGS/$tag.log" | grep -v 'Maximum resident' | tail -4 >>"$LOGS/summary.txt"
        cp "$LOGS/$tag.json" "$OUT/" 2>/dev/null
      done
      ;;
    peer-6b)
      # PyTorch's answer on the same model and GPU: FSDP2 with CPUOffloadPolicy (COLO_PEER_6B_OFFLOAD:
      # pageable = pin_memory=False, pinned), timm blocks with gradient checkpointing, the same batch
      # and accumulation as gemini-6b.
      for offload in ${COLO_PEER_6B_OFFLOAD:-pageable}; do
        tag=6b_fsdp2_$offload
        /usr/bin/time -v timeout "${COLO_6B_TIMEOUT:-300}" python3 -m torch.distributed.run --standalone --nproc-per-node "${COLO_6B_NPROC:-1}" \
          benchmarks/peers/timm_train_bench.py --mode fsdp2 --model large --embed-dim 4096 --depth 32 --num-heads 64 \
          --mlp-ratio 4 --precision bf16 --batch-size "${COLO_6B_BATCH:-256}" --grad-accum "${COLO_PEER_6B_ACCUM:-16}" \
          --grad-checkpointing --fsdp-cpu-offload "$offload" --warmup-steps "${COLO_6B_WARMUP:-1}" \
          --steps "${COLO_6B_STEPS:-3}" --peak-tflops "${COLO_PEAK_TFLOPS:-0}" --json "$LOGS/$tag.json" >"$LOGS/$tag.log" 2>&1
        note "$tag rc=$?: $(grep -ho '"images_per_s": *[0-9.]*' "$LOGS/$tag.json" 2>/dev/null) $(grep -ho '"peak_mem_gib": *[0-9.]*' "$LOGS/$tag.json" 2>/dev/null) host maxrss $(grep -o 'Maximum resident set size.*' "$LOGS/$tag.log") $(grep -o 'Exit status.*\|Command terminated by signal.*' "$LOGS/$tag.log" | head -2 | tr '\n' ' ')"
        grep -v '^\s' "$LOGS/$tag.log" | grep -iv 'warn' | tail -4 >>"$LOGS/summary.txt"
      done
      ;;
    build-vit-bench)
      # Only what the fp8-peers stage runs of colo (one benchmark, one plugin): ~half build-fp8's time.
      build_release_targets build-vit-bench colo-run colo_vit_bench colo_plugin_torch_ddp
      ;;
    build-fp8)
      # Only what the fp8, main-fp8 and image-folder stages run (issues 24 and 23).
      build_release_targets build-fp8 colo-run colo_vit_bench colo_loader_bench train_vit colo_gpu_kernel_tests \
        colo_plugin_torch_ddp
      ;;
    fp8)
      # Issue 24's precision=fp8 on one GPU: the float8 kernel tests, then colo torch_ddp with precision bf16
      # and fp8, alternately (COLO_FP8_REPEATS times, default 2), on ViT-L/16 batch 128 and ViT-B/16 batch
      # 256 (COLO_FP8_MODELS). MFU is against the same bf16 peak (--peak-tflops 1: images/s are the figure).
      build-gpu/bin/colo_gpu_kernel_tests --gtest_filter='Fp8*' >"$LOGS/fp8_tests.log" 2>&1
      note "fp8 kernel tests rc=$?: $(grep -cE '^\[       OK' "$LOGS/fp8_tests.log") passed, $(grep -cE '^\[  FAILED  \] [A-Z]' "$LOGS/fp8_tests.log") failed, $(grep -cE '^\[  SKIPPED' "$LOGS/fp8_tests.log") skipped"
      grep -E "Failure|Expected|Which is|actual|SKIPPED \]" "$LOGS/fp8_tests.log" | head -20 >>"$LOGS/summary.txt"
      for model in ${COLO_FP8_MODELS:-large base}; do
        batch=256
        [ "$model" = large ] && batch=128
        for ((i = 0; i < ${COLO_FP8_REPEATS:-2}; i++)); do
          # COLO_FP8_KINDS: bf16, fp8 (current scaling), fp8_delayed (fp8_scaling=delayed, issue 39); a
          # _unfused suffix runs the fp8 kind with the MLP's GELU outside fc2's cast (--fp8-unfused-gelu); a
          # _fwdonly suffix keeps that fusion but casts fc1's output gradient after the GELU's backward
          # (--fp8-unfused-gelu-backward).
          for p in ${COLO_FP8_KINDS:-bf16 fp8}; do
            extra=()
            precision=${p%%_*}
            [[ $p == fp8_delayed* ]] && extra+=(--plugin-opt fp8_scaling=delayed)
            [[ $p == *_unfused ]] && extra+=(--fp8-unfused-gelu)
            [[ $p == *_fwdonly ]] && extra+=(--fp8-unfused-gelu-backward)
            timeout 150 build-gpu/bin/colo-run --nproc-per-node 1 build-gpu/bin/colo_vit_bench --plugin torch_ddp \
              --model "$model" --batch-size "$batch" --precision "$precision" "${extra[@]}" --warmup-steps 10 --steps "${COLO_FP8_STEPS:-30}" \
              --peak-tflops 1 --json "$LOGS/fp8_${model}_${p}_$i.json" >"$LOGS/fp8_${model}_${p}_$i.log" 2>&1
            note "$model $p run $i rc=$?: $(grep -ho '"images_per_s": *[0-9.]*' "$LOGS/fp8_${model}_${p}_$i.json" 2>/dev/null | head -1) $(grep -ho '"peak_mem_gib": *[0-9.]*' "$LOGS/fp8_${model}_${p}_$i.json" 2>/dev/null | head -1)"
          done
        done
      done
      python3 - "$LOGS" <<'PY' | tee -a "$LOGS/summary.txt" >>"$OUT/progress.txt"
import glob, json, sys
for model in ("large", "base"):
    mean = {}
    kinds = ("bf16", "fp8", "fp8_unfused", "fp8_delayed", "fp8_delayed_unfused", "fp8_delayed_fwdonly")
    for p in kinds:
        runs = [json.load(open(f))["images_per_s"] for f in sorted(glob.glob(f"{sys.argv[1]}/fp8_{model}_{p}_[0-9]*.json"))]
        if runs:
            mean[p] = sum(runs) / len(runs)
    for p in kinds[1:]:
        if "bf16" in mean and p in mean:
            print(f"fp8 {model}: bf16 {mean['bf16']:.1f} img/s, {p} {mean[p]:.1f} img/s, ratio {mean[p] / mean['bf16']:.3f}")
PY
      ;;
    fp8-peers)
      # Issue 24: colo's precision=fp8 beside torchao's float8 training of timm (torch.compile, autocast
      # bf16 or pure bf16), each with its bf16 run, in one call: ViT-L/16 batch 128 and/or ViT-B/16 batch
      # 256 (COLO_FP8_PEER_MODELS, default large). torchao's wheel is carried in .gpu-deps. An empty
      # COLO_FP8_PEER_COLO_KINDS runs the peers alone (no colo build needed).
      if [ ! -d /tmp/torchao ]; then
        python3 -m pip install --quiet --no-deps --target /tmp/torchao .gpu-deps/torchao-*.whl >"$LOGS/torchao.log" 2>&1
        note "torchao installed rc=$?: $(ls -d /tmp/torchao/torchao-*.dist-info 2>/dev/null | xargs -n1 basename)"
      fi
      for model in ${COLO_FP8_PEER_MODELS:-large}; do
        batch=256
        [ "$model" = large ] && batch=128
        # COLO_FP8_PEER_COLO_KINDS: as the fp8 stage's kinds (bf16, fp8, fp8_delayed); a _nomaster
        # suffix keeps no fp32 master weights (master_weights=false: pure-bf16 timm's like for like).
        for p in ${COLO_FP8_PEER_COLO_KINDS-bf16 fp8}; do
          extra=()
          [[ $p == fp8_delayed* ]] && extra+=(--plugin-opt fp8_scaling=delayed)
          [[ $p == *_nomaster ]] && extra+=(--plugin-opt master_weights=false)
          timeout 150 build-gpu/bin/colo-run --nproc-per-node 1 build-gpu/bin/colo_vit_bench --plugin torch_ddp \
            --model "$model" --batch-size "$batch" --precision "${p%%_*}" "${extra[@]}" --warmup-steps 10 \
            --steps "${COLO_FP8_PEER_STEPS:-30}" --peak-tflops 1 \
            --json "$LOGS/fp8p_${model}_colo_$p.json" >"$LOGS/fp8p_${model}_colo_$p.log" 2>&1
          note "colo $model $p rc=$?: $(grep -ho '"images_per_s": *[0-9.]*' "$LOGS/fp8p_${model}_colo_$p.json" 2>/dev/null | head -1)"
        done
        # COLO_FP8_PEER_RECIPES: torchao recipes (off = timm's own bf16), each with a _pure suffix for
        # pure-bf16 parameters (--param-dtype bf16, no fp32 master copy; torchao's usual setting).
        for f8 in ${COLO_FP8_PEER_RECIPES:-off tensorwise}; do
          dtype=fp32
          case $f8 in *_pure) dtype=bf16 ;; esac
          PYTHONPATH=/tmp/torchao TORCHAO_FORCE_SKIP_LOADING_SO_FILES=1 timeout 240 python3 benchmarks/peers/timm_train_bench.py \
            --mode compile --model "$model" --batch-size "$batch" --precision bf16 --param-dtype "$dtype" \
            --warmup-steps 10 --steps "${COLO_FP8_PEER_STEPS:-30}" \
            --peak-tflops 1 --float8 "${f8%_pure}" --commit "${COLO_COMMIT:-}" --json "$LOGS/fp8p_${model}_timm_$f8.json" \
            >"$LOGS/fp8p_${model}_timm_$f8.log" 2>&1
          note "timm compile float8=$f8 $model rc=$?: $(grep -ho '"images_per_s": *[0-9.]*' "$LOGS/fp8p_${model}_timm_$f8.json" 2>/dev/null | head -1) $(grep -ho '"peak_mem_gib": *[0-9.]*' "$LOGS/fp8p_${model}_timm_$f8.json" 2>/dev/null | head -1)"
          grep -E "Error|error" "$LOGS/fp8p_${model}_timm_$f8.log" | tail -3 >>"$LOGS/summary.txt"
        done
      done
      ;;
    main-fp8)
      # Issue 24: the main job (mini ViT, Fashion-MNIST, 6 epochs, torch_ddp) on one GPU with precision bf16
      # and fp8; the metrics files come back in $OUT for the loss curves.
      for p in ${COLO_MAIN_KINDS:-bf16 fp8}; do
        extra=()
        [ "$p" = fp8_delayed ] && extra=(--plugin-opt fp8_scaling=delayed)
        timeout 280 build-gpu/bin/colo-run --nproc-per-node 1 build-gpu/bin/train_vit --plugin torch_ddp --precision "${p%_delayed}" \
          "${extra[@]}" --metrics "$OUT/main_$p.jsonl" >"$LOGS/main_$p.log" 2>&1
        note "main job $p rc=$?: $(grep -h 'fp8:' "$LOGS/main_$p.log" | head -1) $(tail -1 "$LOGS/main_$p.log") ($((SECONDS - start)) s)"
      done
      ;;
    build-imagefolder)
      # Only what the image-folder stage runs.
      {
        cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOLO_BUILD_TESTS=OFF -DCOLO_BUILD_BENCHMARKS=ON &&
          cmake --build build-gpu -j "$(nproc)" --target colo-run colo_vit_bench colo_loader_bench colo_plugin_torch_ddp
      } >"$LOGS/build.log" 2>&1
      note "build-imagefolder rc=$? ($((SECONDS - start)) s)"
      grep -E "error|FAILED|Could NOT" "$LOGS/build.log" | head -20 | tee -a "$LOGS/summary.txt"
      ;;
    image-folder)
      # Issue 23's target: ViT-B/16 bf16 batch 256 on one GPU trains from a folder of JPEGs at >= 95 % of its
      # synthetic-data images/s. A folder of ImageNet-like JPEGs (500x375, every third portrait, quality 90,
      # ~110 KB: colo_loader_bench --make) is generated here once (COLO_IF_IMAGES, default 16000: more than the
      # runs read, so that no epoch restarts inside the timed steps; all in the page cache, as a warm ImageNet
      # on local NVMe would be). Then the loader alone (1 worker: images per core; all workers), and
      # colo_vit_bench on synthetic data and on the folder, alternately, COLO_IF_REPEATS times each (default 2).
      folder=${COLO_IF_DIR:-/tmp/colo-imagefolder}
      images=${COLO_IF_IMAGES:-16000}
      if [ ! -d "$folder" ]; then
        build-gpu/bin/colo_loader_bench --make "$folder" --classes 100 --images-per-class $((images / 100)) \
          --size 500x375 --quality 90 >"$LOGS/if_make.log" 2>&1
        note "image folder rc=$?: $(tail -1 "$LOGS/if_make.log") ($((SECONDS - start)) s)"
      fi
      workers=${COLO_IF_WORKERS:-$(($(nproc) - 1))}
      for w in 1 "$workers"; do
        timeout 120 build-gpu/bin/colo_loader_bench --data-dir "$folder" --workers "$w" --batch-size 256 \
          --batches $((w == 1 ? 3 : 20)) --json "$LOGS/loader_w$w.json" >"$LOGS/loader_w$w.log" 2>&1
        note "loader alone, $w worker(s) rc=$?: $(tail -1 "$LOGS/loader_w$w.log")"
      done
      common=(--plugin torch_ddp --model base --batch-size 256 --precision bf16 --warmup-steps 10
        --steps "${COLO_IF_STEPS:-40}" --peak-tflops 1)
      for ((i = 0; i < ${COLO_IF_REPEATS:-2}; i++)); do
        for kind in synthetic folder; do
          extra=()
          [ $kind = folder ] && extra=(--image-folder "$folder" --workers "$workers")
          timeout 240 build-gpu/bin/colo-run --nproc-per-node 1 build-gpu/bin/colo_vit_bench "${common[@]}" "${extra[@]}" \
            --json "$LOGS/if_${kind}_$i.json" >"$LOGS/if_${kind}_$i.log" 2>&1
          note "$kind run $i rc=$?: $(grep -ho '"images_per_s": *[0-9.]*' "$LOGS/if_${kind}_$i.json" 2>/dev/null | head -1) $(grep -h 'data:' "$LOGS/if_${kind}_$i.log" | head -1)"
        done
      done
      python3 - "$LOGS" <<'PY' | tee -a "$LOGS/summary.txt" >>"$OUT/progress.txt"
import glob, json, sys
runs = {k: [json.load(open(f)) for f in sorted(glob.glob(f"{sys.argv[1]}/if_{k}_*.json"))] for k in ("synthetic", "folder")}
mean = {k: sum(r["images_per_s"] for r in v) / len(v) for k, v in runs.items() if v}
if len(mean) == 2:
    loader = runs["folder"][-1].get("loader") or {}
    print(f"image-folder: synthetic {mean['synthetic']:.1f} img/s, folder {mean['folder']:.1f} img/s, "
          f"ratio {mean['folder'] / mean['synthetic']:.3f} (target >= 0.95); loader "
          f"{loader.get('images_per_cpu_s') or 0:.0f} images per CPU-second, {loader.get('workers')} workers, "
          f"steps waited {loader.get('wait_s') or 0:.2f} s")
else:
    print(f"image-folder: runs missing ({ {k: len(v) for k, v in runs.items()} }); see the logs")
PY
      ;;
    build-nvjpeg)
      # Issue 38's GPU JPEG decoder: what the nvjpeg stage runs. nvJPEG is the CUDA toolkit's where it has
      # one, else PyPI's wheel carried in .gpu-deps (nvidia_nvjpeg-13.*.whl, unpacked here once; no pip).
      nvjpeg_root=
      if [ ! -f "${CUDA_HOME:-/usr/local/cuda}/include/nvjpeg.h" ]; then
        whl=$(ls .gpu-deps/nvidia_nvjpeg-*.whl 2>/dev/null | head -1)
        if [ -n "$whl" ] && [ ! -f /opt/colo-deps/nvjpeg/nvidia/cu13/include/nvjpeg.h ]; then
          python3 -m zipfile -e "$whl" /opt/colo-deps/nvjpeg >>"$LOGS/build.log" 2>&1
        fi
        [ -f /opt/colo-deps/nvjpeg/nvidia/cu13/include/nvjpeg.h ] && nvjpeg_root=/opt/colo-deps/nvjpeg/nvidia/cu13
      fi
      {
        cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOLO_BUILD_TESTS=ON -DCOLO_BUILD_BENCHMARKS=ON \
          ${nvjpeg_root:+-DCOLO_NVJPEG_ROOT=$nvjpeg_root} &&
          cmake --build build-gpu -j "$(nproc)" --target colo-run colo_vit_bench colo_loader_bench \
            colo_plugin_torch_ddp colo_gpu_nvjpeg_tests
      } >>"$LOGS/build.log" 2>&1
      note "build-nvjpeg rc=$? ($((SECONDS - start)) s): $(grep -ho 'colo: nvJPEG: .*' "$LOGS/build.log" | tail -1)"
      grep -E "error|FAILED|Could NOT" "$LOGS/build.log" | head -20 | tee -a "$LOGS/summary.txt"
      ;;
    nvjpeg)
      # Issue 38's target on one GPU: ViT-B/16 bf16 batch 256 trains from a folder of 500x375 JPEGs with
      # --decoder nvjpeg and 2 loader threads at >= 95 % of its synthetic-data images/s; the CPU decoder beside
      # it at 2 threads and at all cores but one. First the GPU tests (nvJPEG against libjpeg-turbo, batches
      # against the CPU decoder's, resume), then the loader alone per decoder, then the four training runs
      # alternately, COLO_NJ_REPEATS times (default 2). The folder is the image-folder stage's (COLO_IF_DIR).
      build-gpu/bin/colo_gpu_nvjpeg_tests >"$LOGS/nvjpeg_tests.log" 2>&1
      note "nvjpeg tests rc=$?: $(grep -cE '^\[       OK' "$LOGS/nvjpeg_tests.log") passed, $(grep -cE '^\[  FAILED  \] [A-Z]' "$LOGS/nvjpeg_tests.log") failed, $(grep -cE '^\[  SKIPPED' "$LOGS/nvjpeg_tests.log") skipped"
      grep -hE "^measured:|Failure|Expected|Which is|actual|SKIPPED \]|skipped" "$LOGS/nvjpeg_tests.log" | head -40 | tee -a "$LOGS/summary.txt" >>"$OUT/progress.txt"
      folder=${COLO_IF_DIR:-/tmp/colo-imagefolder}
      images=${COLO_IF_IMAGES:-16000}
      if [ ! -d "$folder" ]; then
        build-gpu/bin/colo_loader_bench --make "$folder" --classes 100 --images-per-class $((images / 100)) \
          --size 500x375 --quality 90 >"$LOGS/if_make.log" 2>&1
        note "image folder rc=$?: $(tail -1 "$LOGS/if_make.log") ($((SECONDS - start)) s)"
      fi
      all=${COLO_IF_WORKERS:-$(($(nproc) - 1))}
      for run in nvjpeg:2 cpu:2 "cpu:$all"; do
        timeout 120 build-gpu/bin/colo_loader_bench --data-dir "$folder" --decoder "${run%%:*}" --workers "${run#*:}" \
          --batch-size 256 --batches 10 --json "$LOGS/nj_loader_${run/:/_w}.json" >"$LOGS/nj_loader_${run/:/_w}.log" 2>&1
        note "loader alone, $run rc=$?: $(grep -h '^colo_loader_bench' "$LOGS/nj_loader_${run/:/_w}.log" | tail -1)"
        grep -h "GPU decoding" "$LOGS/nj_loader_${run/:/_w}.log" | tee -a "$LOGS/summary.txt" >>"$OUT/progress.txt"
      done
      common=(--plugin torch_ddp --model base --batch-size 256 --precision bf16 --warmup-steps 10
        --steps "${COLO_NJ_STEPS:-40}" --peak-tflops 1)
      # COLO_NJ_KINDS picks the runs; the _graphs kinds train with cuda_graphs=true (one graph launch a step
      # instead of a thousand kernel launches from the training thread), the _side kinds on a non-blocking
      # stream (--training-stream side); the _profile kinds trace 3 steps after the timed ones and list each
      # thread's CUDA calls (benchmarks/peers/api_calls.py: what the loader threads wait in); the _connN kinds
      # run with CUDA_DEVICE_MAX_CONNECTIONS=N.
      for ((i = 0; i < ${COLO_NJ_REPEATS:-2}; i++)); do
        for kind in ${COLO_NJ_KINDS:-synthetic nvjpeg_w2 cpu_w2 cpu_wall}; do
          extra=()
          case $kind in
            nvjpeg_w2*) extra=(--image-folder "$folder" --decoder nvjpeg --workers 2) ;;
            cpu_w2*) extra=(--image-folder "$folder" --decoder cpu --workers 2) ;;
            cpu_wall*) extra=(--image-folder "$folder" --decoder cpu --workers "$all") ;;
          esac
          [[ $kind == *_graphs ]] && extra+=(--plugin-opt cuda_graphs=true)
          [[ $kind == *_side ]] && extra+=(--training-stream side)
          [[ $kind == *_profile ]] && extra+=(--profile "$LOGS/nj_${kind}_$i.trace.json")
          # _connN: CUDA_DEVICE_MAX_CONNECTIONS=N (the hardware work queues the streams share; 8 by default).
          connections=
          [[ $kind =~ _conn([0-9]+) ]] && connections=${BASH_REMATCH[1]}
          ${connections:+env CUDA_DEVICE_MAX_CONNECTIONS=$connections} \
            timeout 240 build-gpu/bin/colo-run --nproc-per-node 1 build-gpu/bin/colo_vit_bench "${common[@]}" "${extra[@]}" \
            --json "$LOGS/nj_${kind}_$i.json" >"$LOGS/nj_${kind}_$i.log" 2>&1
          note "$kind run $i rc=$?: $(grep -ho '"images_per_s": *[0-9.]*' "$LOGS/nj_${kind}_$i.json" 2>/dev/null | head -1) $(grep -h 'data:' "$LOGS/nj_${kind}_$i.log" | head -1)"
          grep -hiE "error|decoder nvjpeg" "$LOGS/nj_${kind}_$i.log" | head -3 >>"$LOGS/summary.txt"
          grep -h "GPU decoding" "$LOGS/nj_${kind}_$i.log" | tee -a "$LOGS/summary.txt" >>"$OUT/progress.txt"
          if [[ $kind == *_profile ]]; then
            python3 benchmarks/peers/api_calls.py "$LOGS/nj_${kind}_$i.trace.json" 2>&1 | head -60 |
              tee -a "$LOGS/summary.txt" >>"$OUT/progress.txt"
          fi
        done
      done
      python3 - "$LOGS" "$all" <<'PY' | tee -a "$LOGS/summary.txt" >>"$OUT/progress.txt"
import glob, json, sys
import re
files = glob.glob(f"{sys.argv[1]}/nj_*_[0-9]*.json")
kinds = sorted({re.sub(r"^nj_(.*)_[0-9]+\.json$", r"\1", f.split("/")[-1]) for f in files} - {"loader_nvjpeg_w2"})
kinds = [k for k in kinds if not k.startswith("loader_")]
runs = {k: [json.load(open(f)) for f in sorted(glob.glob(f"{sys.argv[1]}/nj_{k}_[0-9]*.json"))] for k in kinds}
mean = {k: sum(r["images_per_s"] for r in v) / len(v) for k, v in runs.items() if v}
labels = {"nvjpeg_w2": "nvJPEG, 2 loader threads", "cpu_w2": "CPU decoder, 2 loader threads",
          "cpu_wall": f"CPU decoder, {sys.argv[2]} loader threads"}
def describe(suffix):
    parts = [{"graphs": "with cuda_graphs", "side": "on a side stream"}.get(p, p.replace("conn", "CUDA_DEVICE_MAX_CONNECTIONS="))
             for p in suffix.split("_") if p]
    return " " + (", ".join(parts) if parts else "eager")
for graphs in sorted(k[len("synthetic"):] for k in mean if k.startswith("synthetic")):
    base = "synthetic" + graphs
    how = describe(graphs)
    print(f"nvjpeg: synthetic{how} {mean[base]:.1f} img/s (ViT-B/16 bf16 batch 256, one GPU, {len(runs[base])} runs)")
    for k in ("nvjpeg_w2", "cpu_w2", "cpu_wall"):
        if k + graphs not in mean:
            continue
        loader = runs[k + graphs][-1].get("loader") or {}
        ratio = mean[k + graphs] / mean[base]
        verdict = ("MEETS" if ratio >= 0.95 else "MISSES") + " the 0.95 target" if k == "nvjpeg_w2" else "for comparison"
        print(f"nvjpeg: {labels[k]}{how}: {mean[k + graphs]:.1f} img/s, ratio {ratio:.3f} ({verdict}); loader "
              f"{loader.get('images_per_cpu_s') or 0:.0f} images per CPU-second, steps waited {loader.get('wait_s') or 0:.2f} s; "
              f"{loader.get('decoder_in_use', '?')}")
PY
      ;;
    per-gpu)
      # Each GPU alone (ViT-B/16 bf16, batch 256, torch_ddp): a GPU, or the CPU socket its process
      # lands on, that is slower than GPU 0 caps every multi-GPU run, and the 1-GPU baselines use GPU 0.
      nvidia-smi topo -m >"$LOGS/topology.txt" 2>&1
      for ((i = 0; i < ngpu; i++)); do
        CUDA_VISIBLE_DEVICES=$i timeout 90 build-gpu/bin/colo-run --nproc-per-node 1 "${vitb_ddp[@]}" \
          --warmup-steps 5 --steps 20 --json "$LOGS/gpu$i.json" >"$LOGS/gpu$i.log" 2>&1
        note "GPU $i alone rc=$?: $(grep -h '"images_per_s"' "$LOGS/gpu$i.json" 2>/dev/null)"
      done
      ;;
    dp-overhead)
      # What a 2-GPU torch_ddp step costs over two independent 1-GPU runs (ViT-B/16 bf16, batch 256):
      # one GPU alone, two 1-GPU runs at once, then 2-GPU runs, one per entry of COLO_DP_RUNS
      # (';'-separated; each entry: VAR=value environment settings and --bench-options, e.g.
      # "NCCL_MAX_CTAS=4", "--no-sync", "--plugin-opt=overlap_communication=false"; "-" is the plain run).
      bench=("${vitb_ddp[@]}" --warmup-steps 10 --steps 60)
      # Each line also gives the GPUs' mean SM clock and power while busy: a slower clock, not the
      # kernels themselves, could be what makes a data-parallel step longer.
      # one_alone TAG LABEL: the 1-GPU run, its record, log and clock samples kept under TAG.
      one() { timeout 90 build-gpu/bin/colo-run --nproc-per-node 1 "${bench[@]}" --json "$LOGS/dp_$1.json" >"$LOGS/dp_$1.log" 2>&1; }
      one_alone() {
        local clocks
        clocks=$(with_clocks "$1" one "$1")
        note "$2: $(grep -h '"images_per_s"' "$LOGS/dp_$1.json") | $clocks"
      }
      one_alone one "one GPU alone"
      pair() {
        local pids=()
        for i in 0 1; do
          CUDA_VISIBLE_DEVICES=$i timeout 90 build-gpu/bin/colo-run --nproc-per-node 1 "${bench[@]}" \
            --json "$LOGS/dp_pair$i.json" >"$LOGS/dp_pair$i.log" 2>&1 &
          pids+=($!)
        done
        wait "${pids[@]}"  # not the clock sampler, which runs in the background too
      }
      clocks=$(with_clocks pair pair)
      note "two 1-GPU runs at once: $(grep -h '"images_per_s"' "$LOGS"/dp_pair*.json | tr -d '\n') | $clocks"
      IFS=';' read -r -a runs <<<"${COLO_DP_RUNS:--;--no-sync;--plugin-opt=overlap_communication=false;NCCL_P2P_DISABLE=1}"
      for run in "${runs[@]}"; do
        split_run "$run"
        two() {
          env "${envs[@]}" timeout 90 build-gpu/bin/colo-run --nproc-per-node 2 "${bench[@]}" "${args[@]}" \
            --json "$LOGS/dp2_$tag.json" >"$LOGS/dp2_$tag.log" 2>&1
        }
        clocks=$(with_clocks "dp2_$tag" two)
        note "2 GPUs [$run] rc=$?: $(grep -h '"images_per_s"' "$LOGS/dp2_$tag.json") | $clocks"
      done
      # The GPUs are warmer now than for the first 1-GPU run: a second one shows how far that moves it.
      one_alone one_again "one GPU alone, again"
      ;;
    peer-scaling)
      # Issue 3's 1.95x: is what colo's 2-GPU torch_ddp step loses the price of any data-parallel step
      # as short as colo's on these GPUs, or colo's own? The same measurement for PyTorch's DDP: timm
      # eager (~80-95 ms per step) and torch.compile'd timm (~70-75 ms, as short as colo's), with
      # gradients in fp32 (autocast, the standard recipe: twice colo's bytes) or bf16 (pure bf16:
      # colo's bytes). ViT-B/16 bf16, batch 256 per GPU, 10 + 60 steps; per run 1 GPU then 2 GPUs,
      # with clocks. COLO_PEER_SCALING picks the runs: colo, colo-late (overlap_communication=false;
      # 2 GPUs only), eager-fp32, eager-bf16, compile-fp32, compile-bf16.
      common=(--model base --batch-size 256 --precision bf16 --warmup-steps 10 --steps 60 --peak-tflops 1)
      for kind in ${COLO_PEER_SCALING:-colo colo-late eager-fp32 compile-bf16 compile-fp32}; do
        for n in 1 2; do
          json="$LOGS/ps_${kind}_$n.json"
          case $kind in
            colo) cmd=(build-gpu/bin/colo-run --nproc-per-node "$n" build-gpu/bin/colo_vit_bench --plugin torch_ddp) ;;
            colo-late)
              [ "$n" = 1 ] && continue
              cmd=(build-gpu/bin/colo-run --nproc-per-node "$n" build-gpu/bin/colo_vit_bench --plugin torch_ddp
                --plugin-opt=overlap_communication=false)
              ;;
            eager-* | compile-*)
              mode=${kind%-*}
              peer=(benchmarks/peers/timm_train_bench.py --param-dtype "${kind#*-}")
              if [ "$n" = 1 ]; then
                cmd=(python3 "${peer[@]}" --mode "$mode")
              else
                cmd=(python3 -m torch.distributed.run --standalone --nproc-per-node "$n" "${peer[@]}" --mode ddp)
                [ "$mode" = compile ] && cmd+=(--compile)
              fi
              ;;
            *) note "peer-scaling: unknown run $kind" && continue ;;
          esac
          clocks=$(with_clocks "ps_${kind}_$n" logged "$LOGS/ps_${kind}_$n.log" timeout 240 "${cmd[@]}" "${common[@]}" --json "$json")
          note "peer-scaling $kind x$n rc=$?: $(grep -ho '"images_per_s": *[0-9.]*' "$json" 2>/dev/null) | $clocks ($((SECONDS - start)) s)"
        done
      done
      ;;
    overlap-probe)
      # One ViT-B/16-sized bf16 all-reduce alone and beside a GEMM stream (what overlapping it with
      # backward costs the compute on these power-capped GPUs), once per entry of COLO_PROBE_RUNS
      # (';'-separated NCCL/PyTorch environment settings and probe options such as --gemms=10; "-" is
      # the plain run). By default NVLink and the host path (RESULTS.md: 2026-11-22, 8591fe2).
      IFS=';' read -r -a runs <<<"${COLO_PROBE_RUNS:--;NCCL_P2P_DISABLE=1}"
      for run in "${runs[@]}"; do
        split_run "$run"
        env "${envs[@]}" timeout 90 python3 -m torch.distributed.run --standalone --nproc-per-node "$ngpu" \
          benchmarks/peers/allreduce_overlap_probe.py --tag="$run" "${args[@]}" >"$LOGS/probe_$tag.log" 2>&1
        note "probe [$run] rc=$?"
        grep -h '^PROBE' "$LOGS/probe_$tag.log" | tee -a "$LOGS/summary.txt" >>"$OUT/progress.txt"
      done
      ;;
    exit-loop)
      # The exit path of multi-GPU jobs (2026-11-22, cbcf300: one rank of a 4-GPU low_level_zero
      # run died of SIGSEGV after writing its results). COLO_EXIT_RUNS short ViT-B runs on every
      # GPU, cycling through torch_ddp and low_level_zero stages 1 and 2. Per run: the exit status,
      # how long the process took to end after its JSON record was written (the exit path alone),
      # and whether it printed PyTorch's "process group has NOT been destroyed" warning, a segfault
      # stack, or one of colo's close() messages.
      # tests/gpu/exit_threads.c, preloaded first, lists the threads still alive at the very end of
      # each process; runs whose ranks still had PyTorch's NCCL threads (pt_nccl_*) there are counted.
      plugins=(torch_ddp "low_level_zero --plugin-opt stage=1" "low_level_zero --plugin-opt stage=2")
      fails=0 warned=0 segv=0 closing=0 nccl_alive=0 lags=()
      gcc -shared -fPIC -O1 -o build-gpu/libexit_threads.so tests/gpu/exit_threads.c
      preload=$PWD/build-gpu/libexit_threads.so${LD_PRELOAD:+ $LD_PRELOAD}
      for ((i = 0; i < ${COLO_EXIT_RUNS:-30}; i++)); do
        read -r -a plugin <<<"${plugins[i % 3]}"
        rm -f "$LOGS/exit.json"
        LD_PRELOAD=$preload timeout 90 build-gpu/bin/colo-run --nproc-per-node "$ngpu" build-gpu/bin/colo_vit_bench --plugin "${plugin[@]}" \
          --model base --batch-size 64 --precision bf16 --peak-tflops 1 --warmup-steps 2 --steps 3 \
          --json "$LOGS/exit.json" >"$LOGS/exit_$i.log" 2>&1
        rc=$?
        lags+=("$(python3 -c 'import os,sys,time; print(f"{time.time() - os.path.getmtime(sys.argv[1]):.2f}")' "$LOGS/exit.json" 2>/dev/null || echo none)")
        [ $rc -ne 0 ] && fails=$((fails + 1)) && note "exit run $i (${plugin[*]}) rc=$rc"
        grep -q "NOT been destroyed" "$LOGS/exit_$i.log" && warned=$((warned + 1))
        grep -q "SIGSEGV\|Segmentation" "$LOGS/exit_$i.log" && segv=$((segv + 1))
        grep -q "colo: closing group" "$LOGS/exit_$i.log" && closing=$((closing + 1))
        grep -q "exit-threads.*pt_nccl" "$LOGS/exit_$i.log" && nccl_alive=$((nccl_alive + 1))
      done
      note "threads at the end of run 0: $(grep -h 'exit-threads' "$LOGS/exit_0.log" | tr '\n' ';')"
      note "exit-loop on $ngpu GPUs: ${COLO_EXIT_RUNS:-30} runs, $fails failed, $segv segfaults, $warned with the not-destroyed warning, $closing with a close() message, $nccl_alive with NCCL threads alive at the end ($((SECONDS - start)) s)"
      note "seconds from the JSON record to the end of colo-run: ${lags[*]}"
      ;;
    build-multi)
      # What the distributed stages run (NCCL dist tests, the two-GPU layouts, faults, small microbatches):
      # not the unit tests, which take most of a full build.
      {
        cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOLO_BUILD_TESTS=ON -DCOLO_BUILD_BENCHMARKS=ON &&
          cmake --build build-gpu -j "$(nproc)" --target colo-run colo_vit_bench colo_dist_tests colo_plugin_torch_ddp \
            colo_plugin_low_level_zero colo_plugin_gemini colo_plugin_hybrid_parallel colo_gpu_kernel_tests colo_gpu_vit_parity colo_gpu_graph_tests \
            colo-plan train_vit
      } >"$LOGS/build.log" 2>&1
      note "build-multi rc=$? ($((SECONDS - start)) s)"
      grep -E "error|FAILED|Could NOT" "$LOGS/build.log" | head -20 | tee -a "$LOGS/summary.txt"
      gcc -shared -fPIC -O1 -o build-gpu/libsegv_backtrace.so tests/gpu/segv_backtrace.c >>"$LOGS/build.log" 2>&1
      ;;
    build-bench)
      # Only colo-run, colo_vit_bench and the plugins it loads (the save-stall stages).
      {
        cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOLO_BUILD_TESTS=ON -DCOLO_BUILD_BENCHMARKS=ON &&
          cmake --build build-gpu -j "$(nproc)" --target colo-run colo_vit_bench colo_plugin_torch_ddp colo_plugin_gemini colo_plugin_hybrid_parallel
      } >"$LOGS/build.log" 2>&1
      note "build-bench rc=$? ($((SECONDS - start)) s)"
      grep -E "error|FAILED|Could NOT" "$LOGS/build.log" | head -20 | tee -a "$LOGS/summary.txt"
      ;;
    build-graphs)
      # Only what the graphs stage runs (a short device budget: no dist tests, no unit tests).
      {
        cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOLO_BUILD_TESTS=ON -DCOLO_BUILD_BENCHMARKS=ON &&
          cmake --build build-gpu -j "$(nproc)" --target colo-run colo_vit_bench colo_plugin_torch_ddp \
            colo_plugin_hybrid_parallel colo_gpu_graph_tests
      } >"$LOGS/build.log" 2>&1
      note "build-graphs rc=$? ($((SECONDS - start)) s)"
      grep -E "error|FAILED|Could NOT" "$LOGS/build.log" | head -20 | tee -a "$LOGS/summary.txt" >>"$OUT/progress.txt"
      ;;
    build-graphs-pp)
      # Issue 44's pipeline and data-parallel part: only what graphs-pp runs.
      {
        cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOLO_BUILD_TESTS=ON &&
          cmake --build build-gpu -j "$(nproc)" --target colo-run colo_plugin_torch_ddp colo_plugin_hybrid_parallel \
            colo_gpu_graph_tests colo_dist_tests
      } >"$LOGS/build.log" 2>&1
      note "build-graphs-pp rc=$? ($((SECONDS - start)) s)"
      grep -E "error|FAILED|Could NOT" "$LOGS/build.log" | head -20 | tee -a "$LOGS/summary.txt" >>"$OUT/progress.txt"
      ;;
    build-bias-grad)
      # Issue 39/44's bias-gradient kernel: what the graphs stage runs, and the kernel tests.
      {
        cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOLO_BUILD_TESTS=ON -DCOLO_BUILD_BENCHMARKS=ON &&
          cmake --build build-gpu -j "$(nproc)" --target colo-run colo_vit_bench colo_plugin_torch_ddp \
            colo_plugin_hybrid_parallel colo_gpu_graph_tests colo_gpu_kernel_tests
      } >"$LOGS/build.log" 2>&1
      note "build-bias-grad rc=$? ($((SECONDS - start)) s)"
      grep -E "error|FAILED|Could NOT" "$LOGS/build.log" | head -20 | tee -a "$LOGS/summary.txt" >>"$OUT/progress.txt"
      ;;
    bias-grad)
      # The bias gradient by colo's column-sum kernel (core/src/kernels/column_sum.cu): against fp64
      # and cuBLAS, bit-for-bit repeats, the fallbacks, linear's backward, the timing beside cuBLAS;
      # with the fp8 tests (fp8_linear's bias gradient is the same call).
      timeout 200 build-gpu/bin/colo_gpu_kernel_tests --gtest_filter='BiasGradient.*:Fp8*' >"$LOGS/bias_grad_tests.log" 2>&1
      note "bias-gradient tests rc=$?: $(grep -cE '^\[       OK' "$LOGS/bias_grad_tests.log") passed, $(grep -cE '^\[  FAILED  \] [A-Z]' "$LOGS/bias_grad_tests.log") failed"
      grep -E "Failure|Expected|Which is|error|what\(\)|FAILED  \]|bias gradient" "$LOGS/bias_grad_tests.log" | head -40 | tee -a "$LOGS/summary.txt" >>"$OUT/progress.txt"
      ;;
    bias-grad-broken)
      # The tests above seen failing: the same build with the chunks' last warp left out of the final
      # sum. Restores the source afterwards (the next build recompiles it).
      src=core/src/kernels/column_sum.cu
      cp "$src" /tmp/column_sum.cu.orig
      sed -i 's/for (int w = 0; w < kWarps; ++w) total += warp_sums\[w\]\[lane\];/for (int w = 0; w < kWarps - 1; ++w) total += warp_sums[w][lane];/' "$src"
      # and linear_gelu's sums of the GELU gradient left out (its bias gradient then zero).
      cp core/src/kernels/gelu_backward_bias.cu /tmp/gelu_backward_bias.cu.orig
      sed -i 's/sums\[i\] += to_float(dx\[i\]);/sums[i] += 0.f;/' core/src/kernels/gelu_backward_bias.cu
      cmake --build build-gpu -j "$(nproc)" --target colo_gpu_kernel_tests >"$LOGS/build_broken.log" 2>&1
      note "bias-grad-broken build rc=$? ($(diff /tmp/column_sum.cu.orig "$src" | grep -c '^>') + $(diff /tmp/gelu_backward_bias.cu.orig core/src/kernels/gelu_backward_bias.cu | grep -c '^>') lines changed)"
      timeout 200 build-gpu/bin/colo_gpu_kernel_tests --gtest_filter='BiasGradient.*' >"$LOGS/bias_grad_broken.log" 2>&1
      note "bias-gradient tests with the kernel broken rc=$?: $(grep -cE '^\[       OK' "$LOGS/bias_grad_broken.log") passed, $(grep -cE '^\[  FAILED  \] [A-Z]' "$LOGS/bias_grad_broken.log") failed"
      cp /tmp/column_sum.cu.orig "$src"
      cp /tmp/gelu_backward_bias.cu.orig core/src/kernels/gelu_backward_bias.cu
      ;;
    graphs-pp)
      # Capture slots on one GPU (graphed against eager, bit for bit), then pipelines and data
      # parallelism with cuda_graphs over every GPU (NCCL), against their eager runs.
      timeout 200 build-gpu/bin/colo_gpu_graph_tests >"$LOGS/graph_tests.log" 2>&1
      note "graph tests rc=$?: $(grep -cE '^\[       OK' "$LOGS/graph_tests.log") passed, $(grep -cE '^\[  FAILED  \] [A-Z]' "$LOGS/graph_tests.log") failed"
      grep -E "Failure|Expected|Which is|error|what\(\)|FAILED  \]" "$LOGS/graph_tests.log" | head -30 | tee -a "$LOGS/summary.txt" >>"$OUT/progress.txt"
      # The whole suite takes ~270 s on four GPUs (2026-11-26; communicator set-up grows with the ranks).
      COLO_TIMEOUT_MS=60000 timeout "${COLO_TEST_TIMEOUT:-$((ngpu > 2 ? 450 : 240))}" build-gpu/bin/colo-run --nproc-per-node "$ngpu" --rdzv-file auto \
        build-gpu/bin/colo_dist_tests --gtest_filter='CudaGraphsOverRanks.*' >"$LOGS/graph_dist_tests.log" 2>&1
      note "graph dist tests on $ngpu GPUs rc=$?"
      grep -E "Failure|Expected|Which is|what\(\)|FAILED|PASSED|SKIPPED" "$LOGS/graph_dist_tests.log" | head -40 | tee -a "$LOGS/summary.txt" >>"$OUT/progress.txt"
      ;;
    graphs)
      # Issue 44: the CUDA-graph tests (graphed against eager, bit for bit), then one GPU, alternating:
      # ViT-B/16 bf16 batch 32 eager, cuda_graphs, timm under torch.compile(mode="reduce-overhead");
      # batch 256 as 8 x 32 under --grad-accum 8 and hybrid_parallel num_microbatches=8 with graphs;
      # ViT-Ti/16 batch 256 with graphs beside timm reduce-overhead (COLO_GRAPH_RUNS selects).
      timeout 200 build-gpu/bin/colo_gpu_graph_tests >"$LOGS/graph_tests.log" 2>&1
      note "graph tests rc=$?: $(grep -cE '^\[       OK' "$LOGS/graph_tests.log") passed, $(grep -cE '^\[  FAILED  \] [A-Z]' "$LOGS/graph_tests.log") failed"
      grep -E "Failure|Expected|Which is|error|what\(\)|FAILED  \]" "$LOGS/graph_tests.log" | head -30 | tee -a "$LOGS/summary.txt" >>"$OUT/progress.txt"
      g_common=(--precision bf16 --warmup-steps 10 --steps "${COLO_GRAPH_STEPS:-40}" --peak-tflops 1)
      for run in ${COLO_GRAPH_RUNS:-b32_eager b32_graphs b32_timm accum8_graphs pipe8_graphs ti256_graphs ti256_timm ti256_eager}; do
        case $run in
          b32_eager) cmd=(colo base 32 --plugin torch_ddp) ;;
          b256_eager) cmd=(colo base 256 --plugin torch_ddp) ;;
          b32_graphs) cmd=(colo base 32 --plugin torch_ddp --plugin-opt cuda_graphs=true) ;;
          b32_timm) cmd=(timm base 32) ;;
          accum8_graphs) cmd=(colo base 256 --plugin torch_ddp --plugin-opt cuda_graphs=true --grad-accum 8) ;;
          accum8_eager) cmd=(colo base 256 --plugin torch_ddp --grad-accum 8) ;;
          pipe8_graphs) cmd=(colo base 256 --plugin hybrid_parallel --plugin-opt num_microbatches=8 --plugin-opt cuda_graphs=true) ;;
          ti256_graphs) cmd=(colo tiny 256 --plugin torch_ddp --plugin-opt cuda_graphs=true) ;;
          ti256_eager) cmd=(colo tiny 256 --plugin torch_ddp) ;;
          ti256_timm) cmd=(timm tiny 256) ;;
          *) note "unknown graphs run $run"; continue ;;
        esac
        if [ "${cmd[0]}" = colo ]; then
          timeout 150 build-gpu/bin/colo-run --nproc-per-node 1 build-gpu/bin/colo_vit_bench --model "${cmd[1]}" \
            --batch-size "${cmd[2]}" "${cmd[@]:3}" "${g_common[@]}" --json "$LOGS/g_$run.json" >"$LOGS/g_$run.log" 2>&1
        else
          timeout 240 python3 benchmarks/peers/timm_train_bench.py --mode compile --compile-mode reduce-overhead \
            --model "${cmd[1]}" --batch-size "${cmd[2]}" "${g_common[@]}" --json "$LOGS/g_$run.json" >"$LOGS/g_$run.log" 2>&1
        fi
        note "graphs $run rc=$?: $(grep -ho '"images_per_s": *[0-9.]*' "$LOGS/g_$run.json" 2>/dev/null) $(grep -ho '"peak_mem_gib": *[0-9.]*' "$LOGS/g_$run.json" 2>/dev/null)"
        [ -f "$LOGS/g_$run.json" ] || grep -v '^\s*$' "$LOGS/g_$run.log" | tail -3 >>"$LOGS/summary.txt"
      done
      ;;
    pp-debug)
      # Why pp 2 with gpipe hung under NCCL (2026-11-25, f6c4acf: ViT-L/16, 8 microbatches of 16, no output in
      # 150 s): the same run with a smaller model first (does it finish?), then ViT-L in the background, and
      # after COLO_PP_DEBUG_AFTER_S each rank's stacks (cuda-gdb, every thread) and nvidia-smi's view.
      timeout 60 build-gpu/bin/colo-run --nproc-per-node 2 build-gpu/bin/colo_vit_bench --plugin hybrid_parallel \
        --plugin-opt pp_size=2 --plugin-opt num_microbatches=8 --plugin-opt pp_style=gpipe --model base --batch-size 64 \
        --precision bf16 --warmup-steps 2 --steps 4 --peak-tflops 1 --json "$LOGS/ppdbg_base.json" >"$LOGS/ppdbg_base.log" 2>&1
      note "pp-debug ViT-B gpipe 8 x 8 rc=$?: $(grep -ho '"images_per_s": *[0-9.]*' "$LOGS/ppdbg_base.json" 2>/dev/null)"
      NCCL_DEBUG=WARN timeout "${COLO_PP_DEBUG_TIMEOUT:-120}" build-gpu/bin/colo-run --nproc-per-node 2 build-gpu/bin/colo_vit_bench \
        --plugin hybrid_parallel --plugin-opt pp_size=2 --plugin-opt num_microbatches=8 --plugin-opt pp_style=gpipe \
        --model large --batch-size 128 --precision bf16 --warmup-steps 2 --steps 4 --peak-tflops 1 \
        --json "$LOGS/ppdbg_large.json" >"$LOGS/ppdbg_large.log" 2>&1 &
      job=$!
      sleep "${COLO_PP_DEBUG_AFTER_S:-45}"
      if kill -0 $job 2>/dev/null; then
        nvidia-smi >"$LOGS/ppdbg_smi.txt" 2>&1
        for pid in $(pgrep -f "bin/colo_vit_bench"); do
          rank=$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep '^RANK=' | cut -d= -f2)
          timeout 60 cuda-gdb -p "$pid" -batch -ex "info threads" -ex "thread apply all bt 30" >"$LOGS/ppdbg_stacks_rank$rank.txt" 2>&1
          note "pp-debug stacks of rank $rank (pid $pid): $(grep -c '^#' "$LOGS/ppdbg_stacks_rank$rank.txt") frames"
          cp "$LOGS/ppdbg_stacks_rank$rank.txt" "$OUT/" 2>/dev/null
        done
      fi
      wait $job
      note "pp-debug ViT-L gpipe 8 x 16 rc=$?: $(grep -ho '"images_per_s": *[0-9.]*' "$LOGS/ppdbg_large.json" 2>/dev/null)"
      # Where 1f1b loses to interleaved at pp 2 (634 against 967 images/s, same call): a kernel trace of each.
      traces=()
      for style in 1f1b interleaved; do
        extra=()
        [ $style = interleaved ] && extra=(--plugin-opt num_model_chunks=2)
        timeout 120 build-gpu/bin/colo-run --nproc-per-node 2 build-gpu/bin/colo_vit_bench --plugin hybrid_parallel \
          --plugin-opt pp_size=2 --plugin-opt num_microbatches=8 --plugin-opt pp_style=$style "${extra[@]}" --model large \
          --batch-size 128 --precision bf16 --warmup-steps 3 --steps 6 --peak-tflops 1 --profile "$LOGS/pp_${style}_trace.json" \
          --json "$LOGS/pp_${style}_prof.json" >"$LOGS/pp_${style}_prof.log" 2>&1
        note "pp-debug profile $style rc=$?: $(grep -ho '"images_per_s": *[0-9.]*' "$LOGS/pp_${style}_prof.json" 2>/dev/null)"
        traces+=("${style}_r0=$LOGS/pp_${style}_trace.json" "${style}_r1=$LOGS/pp_${style}_trace.rank1.json")
      done
      python3 benchmarks/peers/kernel_summary.py "${traces[@]}" --top 12 >"$LOGS/pp_kernels.md" 2>&1
      cp "$LOGS/pp_kernels.md" "$OUT/" 2>/dev/null
      rm -f "$LOGS"/pp_*_trace*.json
      ;;
    two-gpu-pp)
      # Issue 45 on two GPUs: ViT-L/16 bf16, batch 128 as COLO_PP_MICRO microbatches (default "8 16"),
      # pp 2 under each schedule, colo (hybrid_parallel) and PyTorch's torch.distributed.pipelining
      # (benchmarks/peers/torch_parallel_bench.py) one after the other; then on one GPU the same
      # microbatches through hybrid_parallel pp 1 (the pipeline's work without a second stage: the
      # denominator of the measured bubble) and torch_ddp at batch 128.
      pp_common=(--model large --batch-size 128 --precision bf16 --warmup-steps 4 --steps "${COLO_PP_STEPS:-12}" --peak-tflops 1)
      for mb in ${COLO_PP_MICRO:-8 16}; do
        for style in ${COLO_PP_STYLES:-1f1b gpipe interleaved zero_bubble}; do
          opts=(--plugin-opt pp_size=2 --plugin-opt num_microbatches=$mb --plugin-opt pp_style=$style)
          peer=(--schedule 1F1B)
          case $style in
            gpipe) peer=(--schedule GPipe) ;;
            interleaved) opts+=(--plugin-opt num_model_chunks=2) peer=(--schedule Interleaved1F1B --chunks 2) ;;
            zero_bubble) peer=(--schedule InterleavedZeroBubble --chunks 2) ;;
          esac
          tag=pp2_${style}_$mb
          timeout 150 build-gpu/bin/colo-run --nproc-per-node 2 build-gpu/bin/colo_vit_bench --plugin hybrid_parallel \
            "${opts[@]}" "${pp_common[@]}" --json "$LOGS/$tag.json" >"$LOGS/$tag.log" 2>&1
          note "colo $tag rc=$?: $(grep -ho '"images_per_s": *[0-9.]*' "$LOGS/$tag.json" 2>/dev/null) $(grep -ho '"peak_mem_gib": *[0-9.]*' "$LOGS/$tag.json" 2>/dev/null)"
          [ "${COLO_PP_PEERS:-1}" = 1 ] || continue
          timeout 180 python3 -m torch.distributed.run --standalone --nproc-per-node 2 benchmarks/peers/torch_parallel_bench.py \
            --mode pp "${peer[@]}" --num-microbatches $mb "${pp_common[@]}" --json "$LOGS/peer_$tag.json" >"$LOGS/peer_$tag.log" 2>&1
          note "torch pipelining $tag (${peer[*]}) rc=$?: $(grep -ho '"images_per_s": *[0-9.]*' "$LOGS/peer_$tag.json" 2>/dev/null) $(grep -ho '"peak_mem_gib": *[0-9.]*' "$LOGS/peer_$tag.json" 2>/dev/null)"
          [ -f "$LOGS/peer_$tag.json" ] || grep -E "Error|error" "$LOGS/peer_$tag.log" | grep -v Warn | tail -2 >>"$LOGS/summary.txt"
        done
        tag=pp1_$mb
        timeout 150 build-gpu/bin/colo-run --nproc-per-node 1 build-gpu/bin/colo_vit_bench --plugin hybrid_parallel \
          --plugin-opt num_microbatches=$mb "${pp_common[@]}" --json "$LOGS/$tag.json" >"$LOGS/$tag.log" 2>&1
        note "colo one GPU $tag rc=$?: $(grep -ho '"images_per_s": *[0-9.]*' "$LOGS/$tag.json" 2>/dev/null)"
      done
      timeout 150 build-gpu/bin/colo-run --nproc-per-node 1 build-gpu/bin/colo_vit_bench --plugin torch_ddp \
        "${pp_common[@]}" --json "$LOGS/ddp1_large.json" >"$LOGS/ddp1_large.log" 2>&1
      note "colo one GPU torch_ddp ViT-L b128 rc=$?: $(grep -ho '"images_per_s": *[0-9.]*' "$LOGS/ddp1_large.json" 2>/dev/null)"
      ;;
    two-gpu-pp-graphs)
      # Issue 44 on two GPUs: ViT-L/16 bf16, batch 128 as 8 microbatches of 16 (and 4 of 32) through
      # pp 2, eager and with cuda_graphs=true (a capture slot per microbatch in flight), GPipe too
      # (it hung under NCCL before the pipeline opened its neighbours' connections up front); one
      # GPU's torch_ddp at batch 128 (the denominator) and PyTorch's Schedule1F1B, same call.
      pg_common=(--model large --batch-size 128 --precision bf16 --warmup-steps 4 --steps "${COLO_PP_STEPS:-12}" --peak-tflops 1)
      # A run's _connN suffix runs it with CUDA_DEVICE_MAX_CONNECTIONS=N (8 queues by default; nvJPEG's streams
      # queued behind training's on a shared one, issue 38: does NCCL's?); tp2 and tp2_sp are tensor parallelism.
      for run in ${COLO_PPG_RUNS:-ddp1 f1b_8_eager f1b_8_graphs gpipe_8_eager gpipe_8_graphs inter_8_graphs f1b_4_graphs peer_f1b_8}; do
        opts=()
        base=$run connections=
        if [[ $run =~ ^(.*)_conn([0-9]+)$ ]]; then base=${BASH_REMATCH[1]} connections=${BASH_REMATCH[2]}; fi
        case $base in
          ddp1) opts=(--plugin torch_ddp) ;;
          f1b_8_eager) opts=(--plugin hybrid_parallel --plugin-opt pp_size=2 --plugin-opt num_microbatches=8) ;;
          f1b_8_graphs) opts=(--plugin hybrid_parallel --plugin-opt pp_size=2 --plugin-opt num_microbatches=8 --plugin-opt cuda_graphs=true) ;;
          gpipe_8_eager) opts=(--plugin hybrid_parallel --plugin-opt pp_size=2 --plugin-opt num_microbatches=8 --plugin-opt pp_style=gpipe) ;;
          gpipe_8_graphs) opts=(--plugin hybrid_parallel --plugin-opt pp_size=2 --plugin-opt num_microbatches=8 --plugin-opt pp_style=gpipe --plugin-opt cuda_graphs=true) ;;
          inter_8_graphs) opts=(--plugin hybrid_parallel --plugin-opt pp_size=2 --plugin-opt num_microbatches=8 --plugin-opt pp_style=interleaved --plugin-opt num_model_chunks=2 --plugin-opt cuda_graphs=true) ;;
          f1b_4_graphs) opts=(--plugin hybrid_parallel --plugin-opt pp_size=2 --plugin-opt num_microbatches=4 --plugin-opt cuda_graphs=true) ;;
          # The cut before 75c588c (the patch embedding counted as a layer: 11 and 13 blocks), for the A/B.
          f1b_8_oldcut) opts=(--plugin hybrid_parallel --plugin-opt pp_size=2 --plugin-opt num_microbatches=8 --plugin-opt layers_per_stage=12,13) ;;
          f1b_8_graphs_oldcut) opts=(--plugin hybrid_parallel --plugin-opt pp_size=2 --plugin-opt num_microbatches=8 --plugin-opt cuda_graphs=true --plugin-opt layers_per_stage=12,13) ;;
          tp2) opts=(--plugin hybrid_parallel --plugin-opt tp_size=2) ;;
          tp2_sp) opts=(--plugin hybrid_parallel --plugin-opt tp_size=2 --plugin-opt enable_sequence_parallelism=true) ;;
          peer_f1b_8) ;;
          *) note "unknown two-gpu-pp-graphs run $run"; continue ;;
        esac
        if [ $base = peer_f1b_8 ]; then
          ${connections:+env CUDA_DEVICE_MAX_CONNECTIONS=$connections} timeout 150 python3 -m torch.distributed.run --standalone --nproc-per-node 2 benchmarks/peers/torch_parallel_bench.py \
            --mode pp --schedule 1F1B --num-microbatches 8 "${pg_common[@]}" --json "$LOGS/ppg_$run.json" >"$LOGS/ppg_$run.log" 2>&1
        else
          nproc=2
          [ $base = ddp1 ] && nproc=1
          ${connections:+env CUDA_DEVICE_MAX_CONNECTIONS=$connections} timeout 120 build-gpu/bin/colo-run --nproc-per-node $nproc build-gpu/bin/colo_vit_bench "${opts[@]}" "${pg_common[@]}" \
            --json "$LOGS/ppg_$run.json" >"$LOGS/ppg_$run.log" 2>&1
        fi
        note "two-gpu-pp-graphs $run rc=$?: $(grep -ho '"images_per_s": *[0-9.]*' "$LOGS/ppg_$run.json" 2>/dev/null) $(grep -ho '"peak_mem_gib": *[0-9.]*' "$LOGS/ppg_$run.json" 2>/dev/null)"
        [ -f "$LOGS/ppg_$run.json" ] || grep -v '^\s*$' "$LOGS/ppg_$run.log" | tail -3 >>"$LOGS/summary.txt"
      done
      ;;
    two-gpu-tp)
      # Issue 45: ViT-L/16 bf16 batch 128, tp 2 with and without sequence parallelism: colo
      # (hybrid_parallel tp_size=2) and DTensor's Colwise/RowwiseParallel, one after the other.
      tp_common=(--model large --batch-size 128 --precision bf16 --warmup-steps 4 --steps "${COLO_TP_STEPS:-12}" --peak-tflops 1)
      for sp in false true; do
        tag=tp2_sp_$sp
        timeout 150 build-gpu/bin/colo-run --nproc-per-node 2 build-gpu/bin/colo_vit_bench --plugin hybrid_parallel \
          --plugin-opt tp_size=2 --plugin-opt enable_sequence_parallelism=$sp "${tp_common[@]}" \
          --json "$LOGS/$tag.json" >"$LOGS/$tag.log" 2>&1
        note "colo $tag rc=$?: $(grep -ho '"images_per_s": *[0-9.]*' "$LOGS/$tag.json" 2>/dev/null) $(grep -ho '"peak_mem_gib": *[0-9.]*' "$LOGS/$tag.json" 2>/dev/null)"
        peer_sp=()
        [ $sp = true ] && peer_sp=(--sequence-parallel)
        timeout 180 python3 -m torch.distributed.run --standalone --nproc-per-node 2 benchmarks/peers/torch_parallel_bench.py \
          --mode tp "${peer_sp[@]}" "${tp_common[@]}" --json "$LOGS/peer_$tag.json" >"$LOGS/peer_$tag.log" 2>&1
        note "DTensor $tag rc=$?: $(grep -ho '"images_per_s": *[0-9.]*' "$LOGS/peer_$tag.json" 2>/dev/null) $(grep -ho '"peak_mem_gib": *[0-9.]*' "$LOGS/peer_$tag.json" 2>/dev/null)"
        [ -f "$LOGS/peer_$tag.json" ] || grep -E "Error|error" "$LOGS/peer_$tag.log" | grep -v Warn | tail -2 >>"$LOGS/summary.txt"
      done
      ;;
    four-gpu)
      # Issue 45 on four GPUs: ViT-L/16 bf16, 128 images per GPU (global 512; one GPU: 128), pp 2 x dp 2,
      # tp 2 x dp 2 and tp 2 x pp 2 with ZeRO stages on dp, pp 4 eager and with cuda_graphs, beside one
      # GPU's torch_ddp (the denominator), dp 4 (torch_ddp, ZeRO-2) and the peers: PyTorch DDP and FSDP2 at
      # 4 GPUs, torch.distributed.pipelining's 1F1B over 4 stages. COLO_FOUR_RUNS picks runs (pp2dp2_z3 and
      # tp2dp2_z3: ZeRO-3 in gemini's chunks on the dp axis, issue 34, beside _z2).
      f_common=(--model large --precision bf16 --warmup-steps 4 --steps "${COLO_FOUR_STEPS:-12}" --peak-tflops 1)
      hp=(--plugin hybrid_parallel)
      for run in ${COLO_FOUR_RUNS:-ddp1 ddp4 zero2_4 peer_ddp4 peer_fsdp2_4 pp2dp2_z0 pp2dp2_z1 tp2dp2_z0 tp2dp2_z1 tp2dp2_z2 tp2pp2 pp4_16 pp4_16_graphs pp4_32_graphs peer_pp4_16}; do
        nproc=4 opts=() batch=128
        case $run in
          ddp1) nproc=1 opts=(--plugin torch_ddp) ;;
          ddp4) opts=(--plugin torch_ddp) ;;
          zero2_4) opts=(--plugin low_level_zero --plugin-opt stage=2) ;;
          peer_ddp4 | peer_fsdp2_4) ;;
          pp2dp2_z0 | pp2dp2_z1 | pp2dp2_z2 | pp2dp2_z3) batch=256 opts=("${hp[@]}" --plugin-opt pp_size=2 --plugin-opt num_microbatches=8 --plugin-opt zero_stage=${run##*_z}) ;;
          tp2dp2_z0 | tp2dp2_z1 | tp2dp2_z2 | tp2dp2_z3) batch=256 opts=("${hp[@]}" --plugin-opt tp_size=2 --plugin-opt zero_stage=${run##*_z}) ;;
          tp2pp2) batch=512 opts=("${hp[@]}" --plugin-opt tp_size=2 --plugin-opt pp_size=2 --plugin-opt num_microbatches=8) ;;
          pp4_16) batch=512 opts=("${hp[@]}" --plugin-opt pp_size=4 --plugin-opt num_microbatches=16) ;;
          # The cut before 75c588c (5, 6, 7 and 6 blocks), for the A/B.
          pp4_16_oldcut) batch=512 opts=("${hp[@]}" --plugin-opt pp_size=4 --plugin-opt num_microbatches=16 --plugin-opt layers_per_stage=6,6,7,6) ;;
          pp4_16_graphs_oldcut) batch=512 opts=("${hp[@]}" --plugin-opt pp_size=4 --plugin-opt num_microbatches=16 --plugin-opt cuda_graphs=true --plugin-opt layers_per_stage=6,6,7,6) ;;
          pp4_16_graphs) batch=512 opts=("${hp[@]}" --plugin-opt pp_size=4 --plugin-opt num_microbatches=16 --plugin-opt cuda_graphs=true) ;;
          pp4_32_graphs) batch=512 opts=("${hp[@]}" --plugin-opt pp_size=4 --plugin-opt num_microbatches=32 --plugin-opt cuda_graphs=true) ;;
          peer_pp4_16) batch=512 ;;
          *) note "unknown four-gpu run $run"; continue ;;
        esac
        json=$LOGS/four_$run.json
        case $run in
          peer_ddp4 | peer_fsdp2_4)
            mode=${run#peer_} && mode=${mode%_4}
            timeout 150 python3 -m torch.distributed.run --standalone --nproc-per-node 4 benchmarks/peers/timm_train_bench.py \
              --mode "$mode" --batch-size $batch "${f_common[@]}" --json "$json" >"$LOGS/four_$run.log" 2>&1 ;;
          peer_pp4_16)
            timeout 150 python3 -m torch.distributed.run --standalone --nproc-per-node 4 benchmarks/peers/torch_parallel_bench.py \
              --mode pp --schedule 1F1B --num-microbatches 16 --batch-size $batch "${f_common[@]}" --json "$json" \
              >"$LOGS/four_$run.log" 2>&1 ;;
          *)
            timeout 120 build-gpu/bin/colo-run --nproc-per-node $nproc build-gpu/bin/colo_vit_bench "${opts[@]}" \
              --batch-size $batch "${f_common[@]}" --json "$json" >"$LOGS/four_$run.log" 2>&1 ;;
        esac
        note "four-gpu $run rc=$? (global batch $((nproc == 1 ? 128 : 512))): $(grep -ho '"images_per_s": *[0-9.]*' "$json" 2>/dev/null) $(grep -ho '"peak_mem_gib": *[0-9.]*' "$json" 2>/dev/null) ($((SECONDS - start)) s)"
        # The JSON records travel in the logs archive ($OUT takes only a few files).
        [ -f "$json" ] || grep -v '^\s*$' "$LOGS/four_$run.log" | tail -3 >>"$LOGS/summary.txt"
      done
      ;;
    two-gpu-faults)
      # Issue 45: a rank killed (SIGKILL) and a rank hung (SIGSTOP) mid-run under NCCL, for pp 2, tp 2
      # and gemini dp 2: colo-run must end the job with the rank named, within the collective timeout
      # (COLO_TIMEOUT_MS=20000 here), never hang. tests/gpu/fault_under_nccl.sh does one run.
      for layout in "pp2:hybrid_parallel:pp_size=2,num_microbatches=8" "tp2:hybrid_parallel:tp_size=2" \
        "gemini2:gemini:placement_policy=auto"; do
        IFS=: read -r name plugin opts <<<"$layout"
        for sig in KILL STOP; do
          COLO_TIMEOUT_MS=20000 timeout 120 bash tests/gpu/fault_under_nccl.sh "$sig" "$plugin" "$opts" \
            >"$LOGS/fault_${name}_$sig.log" 2>&1
          note "fault $name SIG$sig rc=$?: $(grep '^fault:' "$LOGS/fault_${name}_$sig.log" | tr '\n' ' ')"
        done
      done
      ;;
    small-micro-profile)
      # Issue 44: where a small microbatch's time goes, one GPU, ViT-B/16 bf16: torch_ddp at batch 32,
      # batch 256 as 8 x 32 under --grad-accum 8, and hybrid_parallel pp 1 with 8 microbatches of 32;
      # images/s, then a kernel trace of each (kernel_summary.py: GPU busy/idle, CPU launch gaps).
      sm_common=(--model base --precision bf16 --warmup-steps 10 --steps 30 --peak-tflops 1)
      for run in "b32:torch_ddp:32:" "accum8:torch_ddp:256:--grad-accum=8" "pipe8:hybrid_parallel:256:--plugin-opt=num_microbatches=8"; do
        IFS=: read -r tag plugin batch extra <<<"$run"
        extra_args=()
        [ -n "$extra" ] && extra_args=("$extra")
        timeout 120 build-gpu/bin/colo-run --nproc-per-node 1 build-gpu/bin/colo_vit_bench --plugin "$plugin" \
          --batch-size "$batch" "${extra_args[@]}" "${sm_common[@]}" --json "$LOGS/sm_$tag.json" \
          --profile "$LOGS/sm_${tag}_trace.json" >"$LOGS/sm_$tag.log" 2>&1
        note "small-micro $tag rc=$?: $(grep -ho '"images_per_s": *[0-9.]*' "$LOGS/sm_$tag.json" 2>/dev/null)"
      done
      python3 benchmarks/peers/kernel_summary.py "b32=$LOGS/sm_b32_trace.json" "accum8=$LOGS/sm_accum8_trace.json" \
        "pipe8=$LOGS/sm_pipe8_trace.json" --top 25 >"$LOGS/small_micro_kernels.md" 2>&1
      cp "$LOGS/small_micro_kernels.md" "$OUT/" 2>/dev/null
      rm -f "$LOGS"/sm_*_trace*.json
      ;;
    graphs-profile)
      # Issue 44's last one-GPU gaps: where a graphed step's time goes against timm under
      # torch.compile(mode="reduce-overhead"), ViT-Ti/16 batch 256 and ViT-B/16 batch 32, bf16: images/s
      # of each, then a kernel trace of each (kernel_summary.py: kernel time by class, GPU idle gaps and
      # what ended them). COLO_GP_RUNS picks "model:batch" pairs (default "tiny:256 base:32").
      gp_common=(--precision bf16 --warmup-steps 10 --steps 30 --peak-tflops 1)
      gp_traces=()
      for pair in ${COLO_GP_RUNS:-tiny:256 base:32}; do
        IFS=: read -r model batch <<<"$pair"
        for who in colo timm; do
          tag=${who}_${model}_$batch
          if [ $who = colo ]; then
            timeout 150 build-gpu/bin/colo-run --nproc-per-node 1 build-gpu/bin/colo_vit_bench --plugin torch_ddp \
              --plugin-opt cuda_graphs=true --model "$model" --batch-size "$batch" "${gp_common[@]}" \
              --json "$LOGS/gp_$tag.json" --profile "$LOGS/gp_${tag}_trace.json" >"$LOGS/gp_$tag.log" 2>&1
          else
            timeout 240 python3 benchmarks/peers/timm_train_bench.py --mode compile --compile-mode reduce-overhead \
              --model "$model" --batch-size "$batch" "${gp_common[@]}" --json "$LOGS/gp_$tag.json" \
              --profile "$LOGS/gp_${tag}_trace.json" >"$LOGS/gp_$tag.log" 2>&1
          fi
          note "graphs-profile $tag rc=$?: $(grep -ho '"images_per_s": *[0-9.]*' "$LOGS/gp_$tag.json" 2>/dev/null)"
          gp_traces+=("$tag=$LOGS/gp_${tag}_trace.json")
        done
      done
      python3 benchmarks/peers/kernel_summary.py "${gp_traces[@]}" --top 30 >"$LOGS/graphs_profile.md" 2>&1
      cp "$LOGS/graphs_profile.md" "$OUT/" 2>/dev/null
      rm -f "$LOGS"/gp_*_trace*.json
      ;;
    build-onegpu)
      # Issue 41: what one-gpu-ranks and one-gpu-layouts run, compiled with Gloo's headers (Debian's
      # libgloo-dev in .gpu-deps: bash ../shared/gpu/fetch-deps.sh .gpu-deps libgloo-dev), without which
      # the CUDA build has no Gloo backend. CMake says whether it took them ("colo: Gloo backend: ...").
      if [ ! -f /opt/colo-deps/usr/include/gloo/algorithm.h ]; then
        for deb in .gpu-deps/libgloo-dev_*.deb; do
          [ -f "$deb" ] && dpkg -x "$deb" /opt/colo-deps
        done
      fi
      {
        cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOLO_BUILD_TESTS=ON -DCOLO_BUILD_BENCHMARKS=ON &&
          cmake --build build-gpu -j "$(nproc)" --target colo-run train_vit colo_dist_tests colo_plugin_torch_ddp \
            colo_plugin_low_level_zero colo_plugin_gemini colo_plugin_hybrid_parallel
      } >"$LOGS/build_onegpu.log" 2>&1
      note "build-onegpu rc=$? ($((SECONDS - start)) s); $(grep -ho 'colo: Gloo backend: .*' "$LOGS/build_onegpu.log" | head -1)"
      grep -E "error|FAILED|Could NOT" "$LOGS/build_onegpu.log" | head -20 | tee -a "$LOGS/summary.txt"
      gcc -shared -fPIC -O1 -o build-gpu/libsegv_backtrace.so tests/gpu/segv_backtrace.c >>"$LOGS/build_onegpu.log" 2>&1
      ;;
    one-gpu-ranks)
      # Issue 41: the distributed tests with every rank on GPU 0 over Gloo (CUDA tensors), at 2 ranks, or
      # at each count in COLO_ONEGPU_RANKS ("2 4"); COLO_ONEGPU_FILTER: a gtest filter (default: every test).
      for n in ${COLO_ONEGPU_RANKS:-2}; do
        COLO_BACKEND=gloo COLO_TIMEOUT_MS=60000 timeout "${COLO_ONEGPU_TIMEOUT:-420}" build-gpu/bin/colo-run \
          --nproc-per-node "$n" --rdzv-file auto build-gpu/bin/colo_dist_tests --gtest_filter="${COLO_ONEGPU_FILTER:-*}" \
          >"$LOGS/onegpu_dist_$n.log" 2>&1
        rc=$?
        note "one-gpu dist tests, $n ranks on GPU 0 over Gloo rc=$rc ($((SECONDS - start)) s): $(grep -m1 -o 'COLO_BACKEND=gloo: .*' "$LOGS/onegpu_dist_$n.log")"
        grep -E "PASSED|FAILED|SKIPPED|Failure|timed out" "$LOGS/onegpu_dist_$n.log" | sort | uniq -c | sort -rn | head -40 |
          tee -a "$LOGS/summary.txt" >>"$OUT/progress.txt"
      done
      ;;
    one-gpu-layouts)
      # Issue 41: train_vit under each parallel layout with every rank on GPU 0 over Gloo against one rank
      # (tests/gpu/one_gpu_layouts.sh; COLO_ONEGPU_FP8=1 adds tp 2 in fp8).
      fp8=()
      [ "${COLO_ONEGPU_FP8:-0}" = 1 ] && fp8=(--fp8)
      # COLO_ONEGPU_LAYOUTS: the layouts to run (default: the script's; tp4_2d tp8_2p5d tp8_3d on request).
      layouts=()
      [ -n "${COLO_ONEGPU_LAYOUTS:-}" ] && layouts=(--layouts "$COLO_ONEGPU_LAYOUTS")
      COLO_BACKEND=gloo timeout "${COLO_ONEGPU_TIMEOUT:-540}" bash tests/gpu/one_gpu_layouts.sh --build-dir build-gpu \
        --out "$LOGS/layouts" "${fp8[@]}" "${layouts[@]}" >"$LOGS/onegpu_layouts.log" 2>&1
      note "one-gpu layouts rc=$? ($((SECONDS - start)) s): $(tail -1 "$LOGS/onegpu_layouts.log")"
      grep -E '^\||rc=' "$LOGS/onegpu_layouts.log" | tee -a "$LOGS/summary.txt" >>"$OUT/progress.txt"
      ;;
    restart-nccl)
      # Issues 36 and 45: train_vit under colo-run --max-restarts on both GPUs (NCCL), a crash (rank 1
      # after step 12) and a hang (rank 0 after step 25, caught by the collective timeout) injected
      # through COLO_FAULT, --resume auto from --checkpoint-every 5: the final weights against an
      # uninterrupted run's (byte for byte), for pp 2 and dp 2; ViT-S-sized, synthetic data.
      rs_model=(--dataset synthetic --synthetic-samples 2048 --image-size 64 --model custom --patch-size 8 --embed-dim 384
        --depth 6 --heads 6 --batch-size 64 --log-every 5 --eval-batch-size 256 --epochs 2 --max-steps 40
        --checkpoint-every 5 --resume auto)
      for layout in "pp2:hybrid_parallel:--plugin-opt=pp_size=2 --plugin-opt=num_microbatches=4" "dp2:torch_ddp:"; do
        IFS=: read -r name plugin opt <<<"$layout"
        opts=()
        [ -n "$opt" ] && read -ra opts <<<"$opt"
        rm -rf "/tmp/rs_${name}_clean" "/tmp/rs_${name}_faulty"
        timeout 150 build-gpu/bin/colo-run --nproc-per-node 2 build-gpu/bin/train_vit --plugin "$plugin" "${opts[@]}" \
          "${rs_model[@]}" --save "/tmp/rs_${name}_clean" >"$LOGS/restart_${name}_clean.log" 2>&1
        clean_rc=$?
        t0=$SECONDS
        COLO_TIMEOUT_MS=15000 COLO_FAULT="rank=1,step=12,kind=crash;rank=0,step=25,kind=hang,restart=1" \
          timeout 240 build-gpu/bin/colo-run --nproc-per-node 2 --max-restarts 3 build-gpu/bin/train_vit --plugin "$plugin" \
          "${opts[@]}" "${rs_model[@]}" --save "/tmp/rs_${name}_faulty" >"$LOGS/restart_${name}_faulty.log" 2>&1
        faulty_rc=$?
        # Every weights and optimizer file of the last state (a pipeline saves one per stage).
        same=yes compared=0
        for file in "/tmp/rs_${name}_clean/step-00000040"/{model,optimizer}*.safetensors; do
          [ -f "$file" ] || continue
          compared=$((compared + 1))
          cmp -s "$file" "/tmp/rs_${name}_faulty/step-00000040/$(basename "$file")" || same="no ($(basename "$file"))"
        done
        [ $compared -gt 0 ] || same="no (no state saved at step 40)"
        note "restart-nccl $name: clean rc=$clean_rc, faulty rc=$faulty_rc in $((SECONDS - t0)) s, restarts: $(grep -c 'colo-run: restart' "$LOGS/restart_${name}_faulty.log"), final weights and optimizer state identical ($compared files): $same"
        grep -E "COLO_FAULT|colo-run: restart|was killed|was stopped|timed out|resumed from" "$LOGS/restart_${name}_faulty.log" | head -12 >>"$LOGS/summary.txt"
      done
      ;;
    build-restart)
      # Only what restart-nodes runs: colo-run, train_vit and the two plugins it trains with.
      {
        cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOLO_BUILD_TESTS=ON -DCOLO_BUILD_BENCHMARKS=ON &&
          cmake --build build-gpu -j "$(nproc)" --target colo-run train_vit colo_plugin_torch_ddp colo_plugin_hybrid_parallel
      } >"$LOGS/build.log" 2>&1
      note "build-restart rc=$? ($((SECONDS - start)) s)"
      grep -E "error|FAILED|Could NOT" "$LOGS/build.log" | head -20 | tee -a "$LOGS/summary.txt"
      ;;
    restart-nodes)
      # Issue 36: restart-nccl's job as two colo-run "nodes" of one GPU each (CUDA_VISIBLE_DEVICES 0 and
      # 1, over NCCL, agreeing through node 0's colo-run at --control-port): a crash on node 1 (rank 1
      # after step 12) and a hang on node 0 (rank 0 after step 25, caught by node 1's collective
      # timeout); the final weights against an uninterrupted one-node run's, for pp 2 and dp 2.
      rs_model=(--dataset synthetic --synthetic-samples 2048 --image-size 64 --model custom --patch-size 8 --embed-dim 384
        --depth 6 --heads 6 --batch-size 64 --log-every 5 --eval-batch-size 256 --epochs 2 --max-steps 40
        --checkpoint-every 5 --resume auto)
      token=$(build-gpu/bin/colo-run --new-token)
      for layout in "pp2:hybrid_parallel:--plugin-opt=pp_size=2 --plugin-opt=num_microbatches=4" "dp2:torch_ddp:"; do
        IFS=: read -r name plugin opt <<<"$layout"
        opts=()
        [ -n "$opt" ] && read -ra opts <<<"$opt"
        rm -rf "/tmp/rn_${name}_clean" "/tmp/rn_${name}_faulty"
        timeout 150 build-gpu/bin/colo-run --nproc-per-node 2 build-gpu/bin/train_vit --plugin "$plugin" "${opts[@]}" \
          "${rs_model[@]}" --save "/tmp/rn_${name}_clean" >"$LOGS/nodes_${name}_clean.log" 2>&1
        clean_rc=$?
        t0=$SECONDS
        pids=()
        for node in 1 0; do
          COLO_JOB_TOKEN=$token CUDA_VISIBLE_DEVICES=$node COLO_TIMEOUT_MS=15000 \
            COLO_FAULT="rank=1,step=12,kind=crash;rank=0,step=25,kind=hang,restart=1" \
            timeout 240 build-gpu/bin/colo-run --nnodes 2 --node-rank $node --nproc-per-node 1 --max-restarts 3 \
            --master-addr 127.0.0.1 --master-port 29720 build-gpu/bin/train_vit --plugin "$plugin" "${opts[@]}" \
            "${rs_model[@]}" --save "/tmp/rn_${name}_faulty" >"$LOGS/nodes_${name}_faulty_$node.log" 2>&1 &
          pids+=($!)
        done
        wait "${pids[0]}"; rc1=$?
        wait "${pids[1]}"; rc0=$?
        same=yes compared=0
        for file in "/tmp/rn_${name}_clean/step-00000040"/{model,optimizer}*.safetensors; do
          [ -f "$file" ] || continue
          compared=$((compared + 1))
          cmp -s "$file" "/tmp/rn_${name}_faulty/step-00000040/$(basename "$file")" || same="no ($(basename "$file"))"
        done
        [ $compared -gt 0 ] || same="no (no state saved at step 40)"
        note "restart-nodes $name: clean rc=$clean_rc, faulty node 0 rc=$rc0 node 1 rc=$rc1 in $((SECONDS - t0)) s, restarts: $(grep -c 'colo-run: restart' "$LOGS/nodes_${name}_faulty_0.log"), final weights and optimizer state identical ($compared files): $same"
        for node in 0 1; do
          grep -E "COLO_FAULT|colo-run: |resumed from" "$LOGS/nodes_${name}_faulty_$node.log" | sed "s/^/node $node: /" | head -12 |
            tee -a "$LOGS/summary.txt" >>"$OUT/progress.txt"
        done
      done
      ;;
    elastic-nodes)
      # Issue 36 / 45: colo-run --elastic across two "nodes" of one GPU each (CUDA_VISIBLE_DEVICES 0
      # and 1, NCCL), train_vit dp 2 (torch_ddp, fp32): node 1's colo-run is killed from outside once
      # the run has saved step 10; node 0's colo-run leaves node 1 out and the run finishes as dp 1
      # (accumulating 2 passes). Per-step losses against an uninterrupted dp 2 run's; the time from the
      # kill to the restart line.
      en_model=(--dataset synthetic --synthetic-samples 2048 --image-size 64 --model custom --patch-size 8 --embed-dim 384
        --depth 6 --heads 6 --batch-size 64 --log-every 1 --eval-batch-size 256 --epochs 2 --max-steps 40
        --checkpoint-every 5 --resume auto)
      token=$(build-gpu/bin/colo-run --new-token)
      rm -rf /tmp/en_clean /tmp/en_faulty
      timeout 150 build-gpu/bin/colo-run --nproc-per-node 2 build-gpu/bin/train_vit --plugin torch_ddp "${en_model[@]}" \
        --save /tmp/en_clean --metrics "$LOGS/en_clean.jsonl" >"$LOGS/en_clean.log" 2>&1
      note "elastic-nodes: clean dp 2 rc=$?"
      pids=()
      for node in 1 0; do
        COLO_JOB_TOKEN=$token CUDA_VISIBLE_DEVICES=$node COLO_TIMEOUT_MS=15000 \
          timeout 240 build-gpu/bin/colo-run --nnodes 2 --node-rank $node --elastic 1:1 --max-restarts 2 \
          --master-addr 127.0.0.1 --master-port 29730 build-gpu/bin/train_vit --plugin torch_ddp "${en_model[@]}" \
          --save /tmp/en_faulty --metrics "$LOGS/en_faulty.jsonl" >"$LOGS/en_faulty_$node.log" 2>&1 &
        pids+=($!)
      done
      for ((i = 0; i < 600; i++)); do [ -d /tmp/en_faulty/step-00000010 ] && break; sleep 0.1; done
      t_kill=$(date +%s.%N)
      pkill -9 -f -- "colo-run --nnodes 2 --node-rank 1 " && note "elastic-nodes: killed node 1's colo-run after step 10 was saved"
      wait "${pids[1]}"; rc0=$?
      wait "${pids[0]}"; rc1=$?
      note "elastic-nodes: node 0 rc=$rc0, node 1 rc=$rc1 (killed: 137 or -9)"
      grep -E "colo-run: |resumed from|elastic:" "$LOGS/en_faulty_0.log" | head -12 | sed 's/^/node 0: /' |
        tee -a "$LOGS/summary.txt" >>"$OUT/progress.txt"
      python3 - "$LOGS/en_clean.jsonl" "$LOGS/en_faulty.jsonl" "$t_kill" "$LOGS/en_faulty_0.log" <<'PY' | tee -a "$LOGS/summary.txt" >>"$OUT/progress.txt"
import json, sys
def losses(path):
    out = {}
    for line in open(path):
        r = json.loads(line)
        if r.get("event") == "train": out[r["step"]] = r["loss"]
    return out
clean, faulty = losses(sys.argv[1]), losses(sys.argv[2])
common = sorted(set(clean) & set(faulty))
diffs = [abs(clean[s] - faulty[s]) for s in common]
after = [abs(clean[s] - faulty[s]) for s in common if s > 10]
print(f"elastic-nodes: {len(common)} steps in both (clean {len(clean)}, elastic {len(faulty)}); max |loss diff| "
      f"{max(diffs):.3e}, after step 10 (dp 1 x accumulation 2) {max(after) if after else float('nan'):.3e}")
PY
      ;;
    four-gpu-2d)
      # Issue 35: 2D tensor parallelism on four GPUs over NCCL. The distributed tests of the 2D code
      # (4 ranks), then ViT-L/16 bf16 batch 128: one GPU (torch_ddp), tp 4 in 1d and in 2d (a 2 x 2
      # grid) under hybrid_parallel, and DTensor's Colwise/RowwiseParallel at tp 4, one after the other.
      COLO_TIMEOUT_MS=60000 timeout 200 build-gpu/bin/colo-run --nproc-per-node 4 build-gpu/bin/colo_dist_tests \
        --gtest_filter='Vit2d.*:Tp2d.*:GradNorm.EachDistinct*:HybridParallel.TensorParallelCheckpoints*:HybridParallel.TwoDimensional*:LayoutEquivalence.*' \
        >"$LOGS/nccl_2d_tests.log" 2>&1
      note "2d dist tests over NCCL, 4 GPUs rc=$? ($((SECONDS - start)) s)"
      grep -E "rank 0\] \[  (PASSED|FAILED)|rank 0\] \[measured\].*tp=4" "$LOGS/nccl_2d_tests.log" | head -12 | tee -a "$LOGS/summary.txt" >>"$OUT/progress.txt"
      tp_common=(--model large --batch-size 128 --precision bf16 --warmup-steps 4 --steps "${COLO_TP_STEPS:-12}" --peak-tflops 1)
      timeout 150 build-gpu/bin/colo-run --nproc-per-node 1 build-gpu/bin/colo_vit_bench --plugin torch_ddp "${tp_common[@]}" \
        --json "$LOGS/one_gpu.json" >"$LOGS/one_gpu.log" 2>&1
      note "colo one GPU rc=$?: $(grep -ho '"images_per_s": *[0-9.]*' "$LOGS/one_gpu.json" 2>/dev/null) $(grep -ho '"peak_mem_gib": *[0-9.]*' "$LOGS/one_gpu.json" 2>/dev/null)"
      for mode in 1d 2d; do
        timeout 150 build-gpu/bin/colo-run --nproc-per-node 4 build-gpu/bin/colo_vit_bench --plugin hybrid_parallel \
          --plugin-opt tp_size=4 --plugin-opt tp_mode=$mode "${tp_common[@]}" --json "$LOGS/tp4_$mode.json" >"$LOGS/tp4_$mode.log" 2>&1
        note "colo tp4 $mode rc=$?: $(grep -ho '"images_per_s": *[0-9.]*' "$LOGS/tp4_$mode.json" 2>/dev/null) $(grep -ho '"peak_mem_gib": *[0-9.]*' "$LOGS/tp4_$mode.json" 2>/dev/null)"
        [ -f "$LOGS/tp4_$mode.json" ] || grep -iE "error" "$LOGS/tp4_$mode.log" | tail -3 | tee -a "$LOGS/summary.txt" >>"$OUT/progress.txt"
      done
      timeout 180 python3 -m torch.distributed.run --standalone --nproc-per-node 4 benchmarks/peers/torch_parallel_bench.py \
        --mode tp "${tp_common[@]}" --json "$LOGS/peer_tp4.json" >"$LOGS/peer_tp4.log" 2>&1
      note "DTensor tp4 rc=$?: $(grep -ho '"images_per_s": *[0-9.]*' "$LOGS/peer_tp4.json" 2>/dev/null) $(grep -ho '"peak_mem_gib": *[0-9.]*' "$LOGS/peer_tp4.json" 2>/dev/null)"
      cp "$LOGS"/*.json "$OUT/" 2>/dev/null
      ;;
    save-stall)
      # Issue 36: what a save costs the training loop on one GPU, ViT-L/16 bf16 batch 64 (COLO_SAVE_BATCH)
      # under torch_ddp: no saves, a save every 100 steps (COLO_SAVE_EVERY), the same with --save-async
      # (colo_vit_bench's saves.stall_s).
      every=${COLO_SAVE_EVERY:-100}
      for run in "none:" "sync:--save-every $every --save-dir /tmp/ckpt_sync" "async:--save-every $every --save-dir /tmp/ckpt_async --save-async"; do
        tag=${run%%:*}
        read -ra extra <<<"${run#*:}"
        rm -rf /tmp/ckpt_sync /tmp/ckpt_async
        timeout 200 build-gpu/bin/colo-run --nproc-per-node 1 build-gpu/bin/colo_vit_bench --plugin torch_ddp --model large \
          --batch-size "${COLO_SAVE_BATCH:-64}" --precision bf16 --warmup-steps 10 --steps "${COLO_SAVE_STEPS:-350}" --peak-tflops 1 "${extra[@]}" \
          --json "$LOGS/save_$tag.json" >"$LOGS/save_$tag.log" 2>&1
        note "save-stall $tag rc=$?: $(grep -ho '"images_per_s": *[0-9.]*' "$LOGS/save_$tag.json" 2>/dev/null) $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); s=d.get('saves') or {}; print('stall_s', s.get('stall_s'))" "$LOGS/save_$tag.json" 2>/dev/null)"
        cp "$LOGS/save_$tag.json" "$OUT/" 2>/dev/null
      done
      ;;
    save-stall-6b)
      # Issue 36's second case: the 6.45B ViT (as gemini-6b) under gemini auto on one GPU, one save at the
      # last of COLO_SAVE_STEPS steps of COLO_6B_BATCH images (--grad-accum COLO_6B_ACCUM), synchronous
      # and asynchronous (COLO_SAVE6B_RUNS); the stall is the save_state call (the asynchronous write is
      # waited after the loop). ~103 GB of state per save: the disk needs twice that free.
      big=(--model large --embed-dim 4096 --depth 32 --num-heads 64 --mlp-ratio 4 --precision bf16
        --batch-size "${COLO_6B_BATCH:-64}" --grad-accum "${COLO_6B_ACCUM:-2}" --activation-checkpointing
        --warmup-steps 1 --steps "${COLO_SAVE_STEPS:-3}" --peak-tflops "${COLO_PEAK_TFLOPS:-0}")
      df -h /tmp >>"$LOGS/summary.txt"
      for tag in ${COLO_SAVE6B_RUNS:-sync async}; do
        extra=(--save-every "${COLO_SAVE_STEPS:-3}" --save-dir /tmp/ckpt6b_$tag)
        [ "$tag" = async ] && extra+=(--save-async)
        [ "$tag" = none ] && extra=()
        rm -rf /tmp/ckpt6b_*
        /usr/bin/time -v timeout "${COLO_6B_TIMEOUT:-500}" build-gpu/bin/colo-run --nproc-per-node 1 build-gpu/bin/colo_vit_bench \
          --plugin gemini --plugin-opt placement_policy=auto "${big[@]}" "${extra[@]}" --json "$LOGS/save6b_$tag.json" \
          >"$LOGS/save6b_$tag.log" 2>&1
        note "save-stall-6b $tag rc=$? ($((SECONDS - start)) s): $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); s=d.get('saves') or {}; print('images_per_s', d.get('images_per_s'), 'step_ms_p50', (d.get('step_time_ms') or {}).get('p50'), 'stall_s', s.get('stall_s'))" "$LOGS/save6b_$tag.json" 2>/dev/null) host maxrss $(grep -o 'Maximum resident set size.*' "$LOGS/save6b_$tag.log") $(du -sh /tmp/ckpt6b_$tag 2>/dev/null | cut -f1)"
        grep -v '^\s' "$LOGS/save6b_$tag.log" | grep -v 'Maximum resident' | tail -4 >>"$LOGS/summary.txt"
        cp "$LOGS/save6b_$tag.json" "$OUT/" 2>/dev/null
      done
      rm -rf /tmp/ckpt6b_*
      ;;
    elastic-gpu)
      # Issue 36 on GPUs: train_vit (gemini, fp32, a small ViT on synthetic data) on every GPU under
      # colo-run --elastic 1:N; rank 1 is killed after step 6 and its GPU then fails to start
      # (COLO_FAULT nostart): the job goes on with N-1 GPUs, renumbered through CUDA_VISIBLE_DEVICES,
      # and the global batch kept; per-step losses against an uninterrupted run on N GPUs.
      el_common=(--dataset synthetic --synthetic-samples 960 --image-size 32 --model custom --patch-size 8 --embed-dim 64
        --depth 4 --heads 4 --batch-size 24 --log-every 1 --eval-batch-size 96 --epochs 100 --max-steps 40
        --checkpoint-every 5 --resume auto --plugin gemini --precision fp32)
      rm -rf /tmp/colo-elastic && mkdir -p /tmp/colo-elastic
      COLO_TIMEOUT_MS=30000 COLO_FAULT="rank=1,step=6,kind=crash;rank=1,kind=nostart,restart=1" timeout 300 \
        build-gpu/bin/colo-run --elastic "1:$ngpu" --max-restarts 3 --grace-period 2 build-gpu/bin/train_vit \
        "${el_common[@]}" --save /tmp/colo-elastic/elastic --metrics "$LOGS/elastic.jsonl" >"$LOGS/elastic.out" 2>"$LOGS/elastic.err"
      note "elastic-gpu elastic rc=$? ($((SECONDS - start)) s): $(grep -h '^colo-run: \(elastic\|restart\)' "$LOGS/elastic.err" | tr '\n' ' ')"
      grep -h "elastic:\|train_vit: plugin" "$LOGS/elastic.out" | tail -2 | tee -a "$LOGS/summary.txt" >>"$OUT/progress.txt"
      timeout 200 build-gpu/bin/colo-run --nproc-per-node "$ngpu" build-gpu/bin/train_vit "${el_common[@]}" \
        --save /tmp/colo-elastic/clean --metrics "$LOGS/elastic_clean.jsonl" >"$LOGS/elastic_clean.out" 2>&1
      note "elastic-gpu uninterrupted rc=$? ($((SECONDS - start)) s)"
      python3 - "$LOGS/elastic.jsonl" "$LOGS/elastic_clean.jsonl" <<'PY' 2>&1 | tee -a "$LOGS/summary.txt" >>"$OUT/progress.txt"
import json, sys
def losses(path):
    return {r["step"]: r["loss"] for r in map(json.loads, open(path)) if r["event"] == "train"}
e, c = losses(sys.argv[1]), losses(sys.argv[2])
after = {s: abs(e[s] - c[s]) for s in c if s > 6 and s in e}
print(f"elastic-gpu: {len(after)} steps after the change compared (of {len(c)}), largest |loss - uninterrupted| "
      f"{max(after.values()):.3g}, first five {[f'{after[s]:.2g}' for s in sorted(after)[:5]]}")
PY
      ;;
    profile-stability)
      # Issue 43: how much colo-plan profile's small-microbatch block times move between runs and
      # with the timing options (ViT-L, tp 1, micro-batches 16/32/64 on GPU 0): the pipeline rows'
      # error follows them. Needs colo-plan (build-multi, or: cmake --build build-gpu --target colo-plan).
      for run in "first:" "again:" "marginal:--marginal" "chain12:--blocks-per-call=12" "repeats9:--repeats=9"; do
        IFS=: read -r tag extra <<<"$run"
        extra_args=()
        [ -n "$extra" ] && extra_args=("$extra")
        CUDA_VISIBLE_DEVICES=0 timeout 200 build-gpu/bin/colo-plan profile --model large --precision bf16 --microbatches 16,32,64 \
          --tp 1 "${extra_args[@]}" --out "$LOGS/stability_$tag.json" >"$LOGS/stability_$tag.log" 2>&1
        note "profile-stability $tag rc=$? ($((SECONDS - start)) s): $(grep 'encoder_block tp 1' "$LOGS/stability_$tag.log" | sed 's/checkpointed.*//' | tr '\n' ' ')"
      done
      ;;
    planner-error)
      # Issues 43 and 45: the planner's predictions against colo_vit_bench (benchmarks/planner/error_table.py)
      # for each preset in COLO_PLANNER_PRESETS ("gpu2 gpu1 cpu"): gpu1 on GPU 0, gpu2 over both GPUs,
      # cpu on this machine's CPU cores with the GPUs hidden (Gloo ranks one core each; needs build-onegpu's
      # Gloo). COLO_PLANNER_ONLY limits the layouts (error_table.py --only); COLO_GPU_MEMORY_GIB the memory;
      # COLO_PLANNER_MARGINAL=1 profiles with colo-plan profile --marginal; COLO_PLANNER_RUNS measured runs per
      # layout (default 3, the median counts); COLO_PLANNER_EXCEPT leaves out layouts (--except);
      # COLO_PLANNER_REPROFILE=1 profiles again before each round (--reprofile; on GPUs off by default).
      mem=${COLO_GPU_MEMORY_GIB:-$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1 | awk '{printf "%d", $1/1024}')}
      for preset in ${COLO_PLANNER_PRESETS:-gpu2 gpu1}; do
        only=()
        [ -n "${COLO_PLANNER_ONLY:-}" ] && only=(--only "$COLO_PLANNER_ONLY")
        [ "${COLO_PLANNER_MARGINAL:-0}" = 1 ] && only+=(--marginal)
        only+=(--runs "${COLO_PLANNER_RUNS:-3}")
        [ -n "${COLO_PLANNER_EXCEPT:-}" ] && only+=(--except "$COLO_PLANNER_EXCEPT")
        [ "${COLO_PLANNER_REPROFILE:-}" = 1 ] && only+=(--reprofile)
        extra=(--gpu-memory-gib "$mem")
        hide=()
        case $preset in cpu*) extra=(--world-sizes "${COLO_PLANNER_CPU_WORLDS:-2,4,8}"); hide=(env CUDA_VISIBLE_DEVICES=) ;; esac
        [ "$preset" = gpu1 ] && hide=(env CUDA_VISIBLE_DEVICES=0)
        timeout "${COLO_PLANNER_TIMEOUT:-500}" "${hide[@]}" python3 benchmarks/planner/error_table.py --preset "$preset" \
          --build build-gpu --out-dir "$LOGS/planner_$preset" "${extra[@]}" "${only[@]}" >"$LOGS/planner_$preset.log" 2>&1
        note "planner-error $preset rc=$? ($((SECONDS - start)) s, load $(cut -d' ' -f1-3 /proc/loadavg))"
        grep -E "ranks, .*error|median|target missed|failed" "$LOGS/planner_$preset.log" | tee -a "$LOGS/summary.txt" >>"$OUT/progress.txt"
        cp "$LOGS/planner_$preset/table.md" "$OUT/planner_${preset}_table.md" 2>/dev/null
        cp "$LOGS/planner_$preset/results.json" "$OUT/planner_${preset}_results.json" 2>/dev/null
        # The inputs the predictions came from, so that repredict.py can price the rows again later.
        mkdir -p "$OUT/planner_${preset}_inputs"
        cp "$LOGS/planner_$preset"/{profile,cluster}_*.json "$OUT/planner_${preset}_inputs/" 2>/dev/null
      done
      ;;
    build-base)
      # Issue 34: the tree before a change, for engine-room's A/B runs: the commit's sources as a tar
      # (git archive COMMIT | gzip > .gpu-base.tgz, made on the development machine and sent untracked),
      # built into build-base with what colo_vit_bench needs.
      rm -rf /tmp/colo-base && mkdir -p /tmp/colo-base && tar xzf .gpu-base.tgz -C /tmp/colo-base
      {
        cmake -S /tmp/colo-base -B build-base -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOLO_BUILD_TESTS=OFF -DCOLO_BUILD_BENCHMARKS=ON &&
          cmake --build build-base -j "$(nproc)" --target colo-run colo_vit_bench colo_plugin_torch_ddp colo_plugin_hybrid_parallel \
            colo_plugin_gemini
      } >"$LOGS/build_base.log" 2>&1
      note "build-base rc=$? ($((SECONDS - start)) s)"
      grep -E "error|FAILED" "$LOGS/build_base.log" | head -20 | tee -a "$LOGS/summary.txt"
      ;;
    engine-room)
      # Issue 34: ViT-B/16 bf16 batch 256 on GPU 0, torch_ddp and hybrid_parallel (tp 1) or the plugins in
      # COLO_AB_PLUGINS, the tree before the change (build-base) and after (build-gpu), alternating,
      # COLO_AB_REPEATS rounds (default 3).
      # COLO_AB_ARGS replaces the model and batch (e.g. "--model tiny --batch-size 256 --plugin-opt cuda_graphs=true").
      read -r -a ab_args <<<"${COLO_AB_ARGS:---model base --batch-size 256}"
      common=("${ab_args[@]}" --precision bf16 --warmup-steps 10 --steps "${COLO_AB_STEPS:-40}" --peak-tflops 1)
      for ((i = 0; i < ${COLO_AB_REPEATS:-3}; i++)); do
        for plugin in ${COLO_AB_PLUGINS:-torch_ddp hybrid_parallel}; do
          for tree in base gpu; do
            CUDA_VISIBLE_DEVICES=0 timeout 150 build-$tree/bin/colo-run --nproc-per-node 1 build-$tree/bin/colo_vit_bench \
              --plugin $plugin "${common[@]}" --json "$LOGS/ab_${tree}_${plugin}_$i.json" >"$LOGS/ab_${tree}_${plugin}_$i.log" 2>&1
            note "engine-room $plugin $tree run $i rc=$?: $(grep -ho '"images_per_s": *[0-9.]*' "$LOGS/ab_${tree}_${plugin}_$i.json" 2>/dev/null) $(grep -ho '"peak_mem_gib": *[0-9.]*' "$LOGS/ab_${tree}_${plugin}_$i.json" 2>/dev/null)"
          done
        done
      done
      ;;
    *) note "unknown stage $stage" ;;
  esac
done
exit 0
