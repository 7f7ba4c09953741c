#!/usr/bin/env python3
"""The colo_vit_bench workload in PyTorch + timm: the peer that colo's numbers are compared to.

Same model (timm vit_*_patch16_224, optionally with overridden dims), same synthetic batch made
once on the device, same optimizer (AdamW, lr 1e-4, weight decay 0.05; fused=True on CUDA),
same loss (cross-entropy on fp32 logits), same warm-up/timed steps, same FLOP model, same MFU
definition (peak = an n x n x n matmul loop in the run's dtype, measured in the same run) and
the same JSON keys, so benchmarks/peers/combine_results.py can put both side by side.

Modes (one process per GPU; multi-GPU modes under torchrun):
  eager    plain PyTorch on one device
  compile  torch.compile(model) on one device
  ddp      DistributedDataParallel            (--compile: torch.compile the DDP model)
  fsdp2    torch.distributed.fsdp.fully_shard (PyTorch >= 2.6 API): each block, then the root
           (--compile: torch.compile each block before sharding, as torchtitan does)

Precision recipes (--precision bf16/fp16):
  --param-dtype fp32 (default)  the standard recipe: fp32 parameters, gradients and optimizer
                                state; torch.autocast runs matmuls in bf16/fp16 (fp16 adds a
                                GradScaler). Under fsdp2 the FSDP2 recipe instead:
                                MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32), no autocast.
  --param-dtype bf16            "pure" bf16: parameters, gradients and AdamW state in bf16,
                                no autocast, no fp32 master copy.
fp32 runs allow TF32 for matrix products (torch.set_float32_matmul_precision("high")), as colo does.

--float8 tensorwise: torchao's float8 training (convert_to_float8_training, the "tensorwise" recipe:
dynamic per-tensor scales, e4m3 forward, e5m2 gradients) on every nn.Linear whose in and out
features are multiples of 16, the peer of colo's precision=fp8 (current scaling); --float8 rowwise:
torchao's "rowwise" recipe (a scale per row of each operand, e4m3 throughout, the more accurate
one torchao recommends for larger models), and rowwise_with_gw_hp (rowwise, the weight gradient in
bf16); torchao comes from PyPI (a wheel
carried to the GPU machine: tests/gpu/device_session.sh, stage fp8-peers).

  python3 benchmarks/peers/timm_train_bench.py --mode eager --model base --batch-size 128 --json eager.json
  python3 -m torch.distributed.run --standalone --nproc-per-node 8 benchmarks/peers/timm_train_bench.py \\
      --mode fsdp2 --model base --batch-size 128 --json fsdp2.json
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from combine_results import git_commit  # noqa: E402

import torch
import torch.distributed as dist
import torch.nn.functional as F

PRESETS = {  # timm's vit_*_patch16_224: (embed_dim, depth, num_heads)
    "tiny": (192, 12, 3),
    "small": (384, 12, 6),
    "base": (768, 12, 12),
    "large": (1024, 24, 16),
}

FLOP_MODEL = (
    "model FLOPs: training = 3 x forward; forward = 2 x matmul MACs per image = 2 x (N*C*P^2*D [patch embed] + "
    "L*(4*T*D^2 [qkv+proj] + 2*T^2*D [QK^T, AV] + 2*T*D*M [fc1+fc2]) + D*K [head]); N=(image/P)^2, T=N+1; norms, "
    "softmax, GELU, biases and optimizer excluded"
)
MFU_DEFINITION = (
    "tflops_per_gpu / peak_tflops; peak = dense n×n×n matmul throughput measured in this run in the run's precision "
    "(mean over ranks) unless --peak-tflops was given"
)


def vit_forward_macs(image_size, patch_size, in_chans, embed_dim, depth, mlp_hidden, num_classes):
    """Multiply-accumulates of one image's forward pass: benchmarks/vit/vit_flops.h, term for term."""
    n = (image_size // patch_size) ** 2
    t = n + 1
    d, m = embed_dim, mlp_hidden
    patch = n * in_chans * patch_size * patch_size * d
    block = 4 * t * d * d + 2 * t * t * d + 2 * t * d * m
    return patch + depth * block + d * num_classes


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=["eager", "compile", "ddp", "fsdp2"], default="eager")
    p.add_argument("--compile", action="store_true", help="with ddp/fsdp2: also torch.compile")
    p.add_argument("--compile-mode", default=None, help="torch.compile mode (default: PyTorch's default)")
    p.add_argument("--model", default="base", help="tiny | small | base | large (timm vit_*_patch16_224)")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--patch-size", type=int)
    p.add_argument("--embed-dim", type=int)
    p.add_argument("--depth", type=int)
    p.add_argument("--num-heads", type=int)
    p.add_argument("--mlp-ratio", type=float)
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--batch-size", type=int, default=64, help="images per step per GPU")
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="bf16")
    p.add_argument("--float8", choices=["off", "tensorwise", "rowwise", "rowwise_with_gw_hp"], default="off",
                   help="torchao float8 training on the linears that fit (see above)")
    p.add_argument("--param-dtype", choices=["fp32", "bf16"], default="fp32",
                   help="fp32: autocast (or FSDP2 mixed precision); bf16: pure-bf16 parameters and optimizer state")
    p.add_argument("--optimizer-impl", choices=["auto", "fused", "foreach"], default="auto",
                   help="AdamW implementation; auto = fused on CUDA, foreach on the CPU")
    p.add_argument("--fsdp-reshard-after-forward", choices=["true", "false"], default="true")
    p.add_argument("--fsdp-cpu-offload", choices=["off", "pinned", "pageable"], default="off",
                   help="fsdp2: CPUOffloadPolicy(pin_memory=True|False): parameters, gradients and optimizer state "
                        "in host memory, the optimizer step on the CPU")
    p.add_argument("--grad-checkpointing", action="store_true",
                   help="timm's set_grad_checkpointing(): each block's activations recomputed in backward")
    p.add_argument("--grad-accum", type=int, default=1,
                   help="the step's batch in N micro-batches, gradient sync only on the last (no_sync / "
                        "set_requires_gradient_sync)")
    p.add_argument("--warmup-steps", type=int, default=10)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--weight-decay", type=float, default=0.05)
    p.add_argument("--peak-tflops", type=float, default=0.0, help="MFU denominator; 0 measures it")
    p.add_argument("--peak-matmul-size", type=int, help="default 8192 on a GPU, 1024 on the CPU")
    p.add_argument("--peak-seconds", type=float, default=2.0)
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--json", help="write the result record here (rank 0)")
    p.add_argument("--profile", help="after the timed steps, record 3 more with torch.profiler and write a Chrome "
                   "trace here (rank r > 0 inserts .rank<r> before the extension); summarise it with kernel_summary.py")
    p.add_argument("--commit", help="commit recorded in the JSON (default: git rev-parse of this checkout)")
    p.add_argument("--check-flops", action="store_true",
                   help="count one forward pass with torch.utils.flop_counter and compare with the FLOP model, then exit")
    args = p.parse_args(argv)
    if args.model not in PRESETS:
        p.error(f"--model {args.model!r}: valid presets are {', '.join(PRESETS)}")
    if args.param_dtype == "bf16" and args.precision != "bf16":
        p.error("--param-dtype bf16 needs --precision bf16")
    if args.compile and args.mode in ("eager", "compile"):
        p.error("--compile goes with --mode ddp or fsdp2; use --mode compile for one device")
    return args


def model_kwargs(args):
    embed_dim, depth, heads = PRESETS[args.model]
    kw = dict(img_size=args.image_size, num_classes=args.num_classes, patch_size=args.patch_size or 16,
              embed_dim=args.embed_dim or embed_dim, depth=args.depth or depth, num_heads=args.num_heads or heads,
              mlp_ratio=args.mlp_ratio or 4.0)
    return kw


def build_model(args):
    import timm

    # Explicit kwargs override the named variant's, so custom smoke-test dims use the same class.
    return timm.create_model(f"vit_{args.model}_patch16_224", pretrained=False, **model_kwargs(args))


def model_flops(args):
    kw = model_kwargs(args)
    macs = vit_forward_macs(kw["img_size"], kw["patch_size"], 3, kw["embed_dim"], kw["depth"],
                            int(kw["embed_dim"] * kw["mlp_ratio"]), kw["num_classes"])
    return 2.0 * macs, 6.0 * macs  # forward, training (3 x forward)


def check_flops(args):
    """The FLOP model against PyTorch's own count of one forward (and backward) pass."""
    from torch.utils.flop_counter import FlopCounterMode

    model = build_model(args)
    x = torch.randn(1, 3, args.image_size, args.image_size)
    forward, _ = model_flops(args)
    with FlopCounterMode(display=False) as counter:
        out = model(x)
    counted_forward = counter.get_total_flops()
    with FlopCounterMode(display=False) as counter:
        out.float().sum().backward()
    counted_backward = counter.get_total_flops()
    # The input image needs no gradient, so the patch embedding's input-gradient product is absent.
    kw = model_kwargs(args)
    patch_flops = 2 * (args.image_size // kw["patch_size"]) ** 2 * 3 * kw["patch_size"] ** 2 * kw["embed_dim"]
    print(f"forward: formula {forward:.6e} FLOPs, FlopCounterMode {counted_forward:.6e} "
          f"(ratio {counted_forward / forward:.6f})")
    print(f"backward: FlopCounterMode {counted_backward:.6e} = {counted_backward / forward:.4f} x formula forward "
          f"({(counted_backward + patch_flops) / forward:.4f} x counting the patch input-gradient the model skips; SDPA backward also recomputes attention)")
    return 0 if abs(counted_forward / forward - 1.0) < 1e-6 else 1


def hardware_name(device):
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return f"{props.name} ({props.total_memory >> 30} GiB)"
    model = platform.processor() or "unknown CPU"
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    return f"{model} ({os.cpu_count()} threads, intra-op threads {torch.get_num_threads()})"


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_matmul_peak(device, dtype, n, min_seconds):
    """benchmarks/vit/device_metrics.cpp's measure_matmul_peak, step for step."""
    with torch.no_grad():
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        c = torch.empty(n, n, device=device, dtype=dtype)
        for _ in range(3):
            torch.mm(a, b, out=c)
        synchronize(device)
        iterations, begin = 0, time.perf_counter()
        while True:
            for _ in range(10):
                torch.mm(a, b, out=c)
            synchronize(device)
            iterations += 10
            seconds = time.perf_counter() - begin
            if seconds >= min_seconds:
                break
    return 2.0 * n ** 3 * iterations / seconds / 1e12, iterations, seconds


def main(argv=None):
    args = parse_args(argv)
    if args.check_flops:
        return check_flops(args)

    distributed = "WORLD_SIZE" in os.environ and int(os.environ["WORLD_SIZE"]) > 1
    if args.mode in ("eager", "compile") and distributed:
        raise SystemExit(f"--mode {args.mode} runs on one device; use --mode ddp or fsdp2 under torchrun")
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = True  # the patch embedding convolution
    torch.set_float32_matmul_precision("high")  # TF32 for fp32 matmuls, as colo_vit_bench

    uses_pg = args.mode in ("ddp", "fsdp2")
    if uses_pg:
        dist.init_process_group("nccl" if use_cuda else "gloo", device_id=device if use_cuda else None)
        rank, world_size = dist.get_rank(), dist.get_world_size()
    else:
        rank, world_size = 0, 1

    def reduce(value, op):
        """value over every rank: MAX (the slowest rank sets the pace) or SUM."""
        if not uses_pg or world_size == 1:
            return value
        t = torch.tensor([value], dtype=torch.float64, device=device)
        dist.all_reduce(t, op=op)
        return t.item()

    compute_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.precision]
    torch.manual_seed(0)
    offload = args.mode == "fsdp2" and args.fsdp_cpu_offload != "off"
    # Under CPU offload the model is initialised on the GPU (a 6.45B-parameter ViT takes minutes to
    # initialise on the CPU) and fully_shard moves the shards to host memory.
    with torch.device(device) if offload else contextlib.nullcontext():
        model = build_model(args)
    if args.grad_checkpointing:
        model.set_grad_checkpointing(True)
    num_params = sum(p.numel() for p in model.parameters())
    if args.batch_size % args.grad_accum != 0:
        raise SystemExit(f"--grad-accum {args.grad_accum} must divide --batch-size {args.batch_size}")
    pure = args.param_dtype == "bf16"
    if pure:
        model = model.to(torch.bfloat16)
    model = model.to(device)

    recipe = "fp32" if args.precision == "fp32" else ("pure-bf16" if pure else "autocast")
    # Decided here, before the recipe's name grows a "+float8-..." suffix: torchao's float8 linears run
    # under autocast like every other op (until b7eb2b1 the suffix switched autocast off, so the float8
    # peer ran its attention, norms and GELU in fp32). FSDP2's mixed precision replaces autocast below.
    autocast_on = recipe == "autocast"
    if args.float8 != "off":
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training

        def fits(module, fqn):
            return isinstance(module, torch.nn.Linear) and module.in_features % 16 == 0 and module.out_features % 16 == 0

        convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name(args.float8), module_filter_fn=fits)
        recipe += f"+float8-{args.float8}"
    if args.mode == "compile":
        model = torch.compile(model, mode=args.compile_mode)
    elif args.mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model, device_ids=[local_rank] if use_cuda else None)
        if args.compile:
            model = torch.compile(model, mode=args.compile_mode)
    elif args.mode == "fsdp2":
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

        placement = (CPUOffloadPolicy(pin_memory=args.fsdp_cpu_offload == "pinned") if offload else OffloadPolicy())
        mp = MixedPrecisionPolicy()
        if args.precision != "fp32" and not pure:
            mp = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32)
            recipe = "fsdp2-mixed-precision"
            autocast_on = False
        reshard = args.fsdp_reshard_after_forward == "true"
        for i, block in enumerate(model.blocks):
            if args.compile:
                block = torch.compile(block, mode=args.compile_mode)
                model.blocks[i] = block
            fully_shard(block, mp_policy=mp, reshard_after_forward=reshard, offload_policy=placement)
        fully_shard(model, mp_policy=mp, reshard_after_forward=reshard, offload_policy=placement)

    impl = args.optimizer_impl
    if impl == "auto":
        impl = "fused" if use_cuda and not offload else "foreach"
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay,
                                  **{impl: True})
    scaler = torch.amp.GradScaler(device.type) if autocast_on and args.precision == "fp16" else None

    # One batch, made once on the device; the same on every rank (see colo_vit_bench).
    gen = torch.Generator().manual_seed(0)
    images = torch.rand(args.batch_size, 3, args.image_size, args.image_size, generator=gen)
    images = ((images - 0.5) / math.sqrt(1.0 / 12.0)).to(device)
    if pure:
        images = images.to(torch.bfloat16)
    labels = torch.randint(0, args.num_classes, (args.batch_size,), generator=gen).to(device)

    micro_images, micro_labels = images.chunk(args.grad_accum), labels.chunk(args.grad_accum)

    def sync_gradients(on):
        if args.mode == "fsdp2":
            model.set_requires_gradient_sync(on)
            return contextlib.nullcontext()
        if args.mode == "ddp" and not on:
            return model.no_sync()
        return contextlib.nullcontext()

    # CUDA-graph modes (reduce-overhead, max-autotune) replay into the same output buffers: tell
    # them where a step begins, so that no output of the previous one is taken as still in use.
    graphs = args.compile_mode in ("reduce-overhead", "max-autotune")

    def train_step():
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()
        ctx = torch.autocast(device.type, dtype=compute_dtype) if autocast_on else contextlib.nullcontext()
        total = 0.0
        for m in range(args.grad_accum):
            last = m + 1 == args.grad_accum
            with sync_gradients(last):
                with ctx:
                    loss = F.cross_entropy(model(micro_images[m]).float(), micro_labels[m]) / args.grad_accum
                (scaler.scale(loss) if scaler is not None else loss).backward()
            total = total + loss.detach()
        loss = total
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    if use_cuda:
        torch.cuda.reset_peak_memory_stats(device)
    model.train()
    for _ in range(args.warmup_steps):
        loss = train_step()
    synchronize(device)
    if uses_pg:
        dist.barrier()

    # Step boundaries without synchronising: CUDA events in stream order, or the clock on the CPU.
    events, marks = [], []

    def mark():
        if use_cuda:
            events.append(torch.cuda.Event(enable_timing=True))
            events[-1].record()
        else:
            marks.append(time.perf_counter())

    begin = time.perf_counter()
    mark()
    for _ in range(args.steps):
        loss = train_step()
        mark()
    synchronize(device)
    local_seconds = time.perf_counter() - begin
    if use_cuda:
        step_ms = [events[i].elapsed_time(events[i + 1]) for i in range(args.steps)]
    else:
        step_ms = [1000.0 * (marks[i + 1] - marks[i]) for i in range(args.steps)]

    if args.profile:
        # After the timed steps, so that profiling overhead never enters the measurement.
        # Every rank records (a slow rank sets everyone's pace); rank r > 0 adds .rank<r>.
        rank = dist.get_rank() if uses_pg else 0
        activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if use_cuda else [])
        with torch.profiler.profile(activities=activities) as prof:
            for _ in range(3):
                train_step()
            synchronize(device)
        stem, ext = os.path.splitext(args.profile)
        prof.export_chrome_trace(args.profile if rank == 0 else f"{stem}.rank{rank}{ext}")

    seconds = reduce(local_seconds, dist.ReduceOp.MAX)
    if use_cuda:
        peak_bytes = torch.cuda.max_memory_allocated(device)
        mem_method = "CUDA caching allocator: peak allocated bytes (torch.cuda.max_memory_allocated)"
    else:
        peak_bytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        mem_method = "CPU: process max resident set size (getrusage ru_maxrss, includes PyTorch itself)"
    peak_mem_gib = reduce(float(peak_bytes), dist.ReduceOp.MAX) / 2 ** 30
    final_loss = float(loss.detach().float().item())

    peak_matmul = None
    peak_tflops = args.peak_tflops
    if peak_tflops == 0.0:
        n = args.peak_matmul_size or (8192 if use_cuda else 1024)
        tflops, iterations, mm_seconds = measure_matmul_peak(device, compute_dtype, n, args.peak_seconds)
        peak_tflops = reduce(tflops, dist.ReduceOp.SUM) / world_size
        peak_matmul = {"n": n, "dtype": args.precision, "iterations": iterations, "seconds": mm_seconds,
                       "tf32_allowed_for_fp32": use_cuda, "rank0_tflops": tflops}

    forward_flops, training_flops = model_flops(args)
    global_batch = args.batch_size * world_size
    images_per_s = global_batch * args.steps / seconds
    tflops_per_gpu = training_flops * images_per_s / world_size / 1e12
    mfu = tflops_per_gpu / peak_tflops
    kw = model_kwargs(args)
    custom = any(getattr(args, k) is not None for k in ("patch_size", "embed_dim", "depth", "num_heads", "mlp_ratio"))
    plugin = f"timm-{args.mode}" + ("-compile" if args.compile else "") + ("-float8" if args.float8 != "off" else "")

    if uses_pg:
        dist.barrier()
    if rank == 0:
        record = {
            "framework": "pytorch+timm",
            "hardware": hardware_name(device),
            "device": str(device),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "commit": args.commit or git_commit(),
            "command": " ".join(shlex.quote(a) for a in [sys.executable] + sys.argv),
            "torch_version": torch.__version__,
            "plugin": plugin,
            "options": {"mode": args.mode, "compile": args.mode == "compile" or args.compile,
                        "compile_mode": args.compile_mode, "precision_recipe": recipe, "autocast": autocast_on,
                        "param_dtype": args.param_dtype, "optimizer": f"AdamW({impl})",
                        "grad_accum": args.grad_accum, "grad_checkpointing": args.grad_checkpointing,
                        "peak_host_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1 << 20),
                        **({"fsdp_cpu_offload": args.fsdp_cpu_offload} if args.mode == "fsdp2" else {}),
                        **({"fsdp_reshard_after_forward": args.fsdp_reshard_after_forward}
                           if args.mode == "fsdp2" else {})},
            "precision": args.precision,
            "model": {"name": "custom" if custom else args.model, "image_size": args.image_size,
                      "patch_size": kw["patch_size"], "embed_dim": kw["embed_dim"], "depth": kw["depth"],
                      "num_heads": kw["num_heads"], "mlp_ratio": kw["mlp_ratio"], "num_classes": args.num_classes,
                      "params": num_params},
            "batch": {"per_replica": args.batch_size, "global": global_batch, "data_parallel_size": world_size},
            "world_size": world_size,
            "warmup_steps": args.warmup_steps,
            "steps": args.steps,
            "images_per_s": images_per_s,
            "tflops_per_gpu": tflops_per_gpu,
            "mfu": mfu,
            "peak_tflops": peak_tflops,
            "peak_tflops_measured": peak_tflops if peak_matmul else None,
            "peak_matmul": peak_matmul,
            "peak_mem_gib": peak_mem_gib,
            "peak_mem_method": mem_method + ", max over ranks",
            "step_time_ms": {"mean": statistics.fmean(step_ms), "p50": statistics.median(step_ms),
                             "min": min(step_ms), "max": max(step_ms)},
            "timed_seconds": seconds,
            "forward_gflops_per_image": forward_flops / 1e9,
            "training_gflops_per_image": training_flops / 1e9,
            "flop_model": FLOP_MODEL,
            "mfu_definition": MFU_DEFINITION,
            "final_loss": final_loss if math.isfinite(final_loss) else None,
        }
        print(f"timm_train_bench: {plugin} | {record['model']['name']} ViT (D={kw['embed_dim']}, L={kw['depth']}, "
              f"{args.image_size}px) {args.precision} {recipe} | world {world_size} | global batch {global_batch}")
        print(f"  {images_per_s:.4g} images/s | {tflops_per_gpu:.4g} TFLOP/s per GPU | MFU {100 * mfu:.3g}% of "
              f"{peak_tflops:.4g} TFLOP/s | peak mem {peak_mem_gib:.2f} GiB | step "
              f"{record['step_time_ms']['mean']:.1f} ms (p50 {record['step_time_ms']['p50']:.1f}) | loss {final_loss:.4f}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(record, f, indent=2)
                f.write("\n")
    if uses_pg:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
