#!/usr/bin/env python3
"""PyTorch's own pipeline and tensor parallelism on the colo_vit_bench workload: the peers of
hybrid_parallel's pp and tp layouts (issue 45).

Modes (under torchrun, one process per GPU; Gloo on CPU ranks for a smoke test):
  pp   torch.distributed.pipelining: timm's ViT cut into stages of whole blocks (the patch
       embedding with the first stage, the final norm and head with the last), one
       PipelineStage per stage, a schedule by name (--schedule GPipe | 1F1B | Interleaved1F1B |
       InterleavedZeroBubble; --chunks stages per rank for the interleaved ones, placed round
       robin as colo places model chunks), --num-microbatches microbatches of the step's batch.
  tp   DTensor tensor parallelism on every block: qkv and fc1 ColwiseParallel, proj and fc2
       RowwiseParallel (Megatron's layout, as colo's shardformer); --sequence-parallel adds
       SequenceParallel LayerNorms with the residual stream split over tokens. timm's fused qkv
       weight is permuted once so that each rank's contiguous column shard holds its own heads'
       [q; k; v] (colo's fused-QKV split), which keeps the attention's math that of the model.

Same model, synthetic batch, optimizer (AdamW lr 1e-4, wd 0.05, fused on CUDA), loss, FLOP model,
MFU definition and JSON keys as timm_train_bench.py; --precision bf16 runs every stage's forward
under autocast with fp32 parameters (the standard recipe), or pure bf16 with --param-dtype bf16.
images/s counts the step's batch once (--batch-size is the batch of one data-parallel replica:
the whole pipeline, or the whole tp group), so it compares directly with colo_vit_bench's.

  python3 -m torch.distributed.run --standalone --nproc-per-node 2 benchmarks/peers/torch_parallel_bench.py \\
      --mode pp --schedule 1F1B --num-microbatches 8 --model large --batch-size 128 --json pp.json
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import shlex
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import timm_train_bench as ttb  # noqa: E402

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

SCHEDULES = ["GPipe", "1F1B", "Interleaved1F1B", "InterleavedZeroBubble"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=["pp", "tp"], required=True)
    p.add_argument("--schedule", choices=SCHEDULES, default="1F1B")
    p.add_argument("--chunks", type=int, default=1, help="pp: stages per rank (2+ for the interleaved schedules)")
    p.add_argument("--num-microbatches", type=int, default=8)
    p.add_argument("--sequence-parallel", action="store_true", help="tp: LayerNorms and residuals on T/tp tokens")
    p.add_argument("--model", default="base")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--patch-size", type=int)
    p.add_argument("--embed-dim", type=int)
    p.add_argument("--depth", type=int)
    p.add_argument("--num-heads", type=int)
    p.add_argument("--mlp-ratio", type=float)
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--batch-size", type=int, default=64, help="the step's batch (one pipeline / one tp group)")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="bf16")
    p.add_argument("--param-dtype", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--warmup-steps", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--peak-tflops", type=float, default=0.0, help="MFU denominator; 0 measures it")
    p.add_argument("--peak-matmul-size", type=int)
    p.add_argument("--peak-seconds", type=float, default=1.0)
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--json", help="write the result record here (rank 0)")
    p.add_argument("--commit")
    args = p.parse_args(argv)
    if args.model not in ttb.PRESETS:
        p.error(f"--model {args.model!r}: valid presets are {', '.join(ttb.PRESETS)}")
    if args.batch_size % args.num_microbatches:
        p.error(f"--num-microbatches {args.num_microbatches} must divide --batch-size {args.batch_size}")
    interleaved = args.schedule.startswith("Interleaved")
    if args.mode == "pp" and interleaved and args.chunks < 2:
        p.error(f"--schedule {args.schedule} needs --chunks 2 or more")
    if args.mode == "pp" and not interleaved and args.chunks != 1:
        p.error(f"--schedule {args.schedule} takes one stage per rank (--chunks 1)")
    if args.param_dtype == "bf16" and args.precision != "bf16":
        p.error("--param-dtype bf16 needs --precision bf16")
    return args


class Autocast(nn.Module):
    """A stage's forward under autocast, so that the schedule sees one plain module."""

    def __init__(self, inner, dtype, enabled):
        super().__init__()
        self.inner, self.dtype, self.enabled = inner, dtype, enabled

    def forward(self, x):
        with torch.autocast(x.device.type, dtype=self.dtype, enabled=self.enabled):
            return self.inner(x)


class VitStage(nn.Module):
    """Blocks [begin, end) of a timm ViT, with the embedding when first and norm + head when last."""

    def __init__(self, vit, begin, end, first, last):
        super().__init__()
        self.first, self.last = first, last
        if first:
            self.patch_embed, self.vit_pos = vit.patch_embed, _PosEmbed(vit)
        self.blocks = nn.Sequential(*[vit.blocks[i] for i in range(begin, end)])
        if last:
            self.norm, self.fc_norm, self.head = vit.norm, vit.fc_norm, vit.head

    def forward(self, x):
        if self.first:
            x = self.vit_pos(self.patch_embed(x))
        x = self.blocks(x)
        if self.last:
            x = self.head(self.fc_norm(self.norm(x)[:, 0]))  # the class token, as timm's 'token' pooling
        return x


class _PosEmbed(nn.Module):
    def __init__(self, vit):
        super().__init__()
        self.cls_token, self.pos_embed = vit.cls_token, vit.pos_embed

    def forward(self, x):
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        return x + self.pos_embed


def stage_bounds(depth, stages):
    """Blocks per stage: even, the remainder to the earliest stages."""
    base, extra = divmod(depth, stages)
    bounds, begin = [], 0
    for s in range(stages):
        end = begin + base + (1 if s < extra else 0)
        bounds.append((begin, end))
        begin = end
    return bounds


def build_pp(args, vit, rank, world, device, dtype, autocast_on):
    from torch.distributed import pipelining as pl

    stages_total = world * args.chunks
    if vit.blocks.__len__() < stages_total:
        raise SystemExit(f"{len(vit.blocks)} blocks cannot fill {stages_total} stages")
    bounds = stage_bounds(len(vit.blocks), stages_total)
    stages, params = [], []
    for c in range(args.chunks):
        s = rank + c * world  # round robin, as colo's interleaved chunks
        begin, end = bounds[s]
        module = Autocast(VitStage(vit, begin, end, s == 0, s == stages_total - 1), dtype, autocast_on).to(device)
        params += list(module.parameters())
        stages.append(pl.PipelineStage(module, s, stages_total, device))

    def loss_fn(output, target):
        return F.cross_entropy(output.float(), target)

    n = args.num_microbatches
    if args.schedule == "GPipe":
        schedule = pl.ScheduleGPipe(stages[0], n, loss_fn=loss_fn)
    elif args.schedule == "1F1B":
        schedule = pl.Schedule1F1B(stages[0], n, loss_fn=loss_fn)
    elif args.schedule == "Interleaved1F1B":
        schedule = pl.ScheduleInterleaved1F1B(stages, n, loss_fn=loss_fn)
    else:
        schedule = pl.ScheduleInterleavedZeroBubble(stages, n, loss_fn=loss_fn)
    first = any(st.is_first for st in stages)
    last = any(st.is_last for st in stages)

    def run(images, labels):
        losses = [] if last else None
        kwargs = {}
        if last:
            kwargs.update(target=labels, losses=losses)
        if first:
            schedule.step(images, **kwargs)
        else:
            schedule.step(**kwargs)
        return torch.stack(losses).mean().detach() if last else None

    return params, run


def permute_qkv_for_tp(attn, tp):
    """Rows of the fused [q; k; v] weight (and bias) reordered as [q_0; k_0; v_0; q_1; ...], so that
    ColwiseParallel's contiguous shard r holds rank r's heads of all three."""
    with torch.no_grad():
        w = attn.qkv.weight
        out, inp = w.shape
        attn.qkv.weight.copy_(w.view(3, tp, out // (3 * tp), inp).transpose(0, 1).reshape(out, inp))
        if attn.qkv.bias is not None:
            b = attn.qkv.bias
            attn.qkv.bias.copy_(b.view(3, tp, out // (3 * tp)).transpose(0, 1).reshape(out))


def build_tp(args, vit, world, device, dtype, autocast_on):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, PrepareModuleOutput,
                                                   RowwiseParallel, SequenceParallel, parallelize_module)

    heads = vit.blocks[0].attn.num_heads
    if heads % world:
        raise SystemExit(f"tp {world} does not divide {heads} heads")
    mesh = init_device_mesh(device.type, (world,))
    sp = args.sequence_parallel
    for block in vit.blocks:
        permute_qkv_for_tp(block.attn, world)
        plan = {
            "attn.qkv": ColwiseParallel(input_layouts=Shard(1) if sp else Replicate()),
            # Under sequence parallelism the outputs stay DTensors split over tokens, like the residual.
            "attn.proj": RowwiseParallel(output_layouts=Shard(1), use_local_output=False) if sp else RowwiseParallel(),
            "mlp.fc1": ColwiseParallel(input_layouts=Shard(1) if sp else Replicate()),
            "mlp.fc2": RowwiseParallel(output_layouts=Shard(1), use_local_output=False) if sp else RowwiseParallel(),
        }
        if sp:
            plan.update({"norm1": SequenceParallel(), "norm2": SequenceParallel()})
        parallelize_module(block, mesh, plan)
        # timm reshapes the local qkv and the attention output by its own head count and width.
        block.attn.num_heads = heads // world
        block.attn.attn_dim = block.attn.attn_dim // world
    if sp:
        # The residual stream enters the blocks split over tokens and leaves them whole for the head.
        parallelize_module(vit.blocks, mesh, PrepareModuleInput(input_layouts=(Replicate(),),
                                                                desired_input_layouts=(Shard(1),),
                                                                use_local_output=False))
        parallelize_module(vit.blocks, mesh, PrepareModuleOutput(output_layouts=(Shard(1),),
                                                                 desired_output_layouts=(Replicate(),)))
    model = Autocast(vit, dtype, autocast_on).to(device)

    def run(images, labels):
        loss = F.cross_entropy(model(images).float(), labels)
        loss.backward()
        return loss.detach()

    return list(model.parameters()), run


def main(argv=None):
    args = parse_args(argv)
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = True
    torch.set_float32_matmul_precision("high")
    dist.init_process_group("nccl" if use_cuda else "gloo", device_id=device if use_cuda else None)
    rank, world = dist.get_rank(), dist.get_world_size()
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[args.precision]
    pure = args.param_dtype == "bf16"
    autocast_on = args.precision != "fp32" and not pure

    torch.manual_seed(0)  # the same model on every rank; each keeps its part
    vit = ttb.build_model(args)
    num_params = sum(p.numel() for p in vit.parameters())
    if pure:
        vit = vit.to(torch.bfloat16)
    if args.mode == "pp":
        params, run = build_pp(args, vit, rank, world, device, dtype, autocast_on)
        layout = f"pp {world} {args.schedule} x{args.chunks} chunks, {args.num_microbatches} microbatches"
    else:
        params, run = build_tp(args, vit, world, device, dtype, autocast_on)
        layout = f"tp {world}" + (" + sequence parallelism" if args.sequence_parallel else "")
    impl = "fused" if use_cuda else "foreach"
    # Under tp the sharded parameters are DTensors and the rest plain tensors, which one fused or
    # foreach step cannot mix: one AdamW per kind (the same update).
    from torch.distributed.tensor import DTensor

    kinds = [[p for p in params if isinstance(p, DTensor)], [p for p in params if not isinstance(p, DTensor)]]
    optimizers = [torch.optim.AdamW(k, lr=1e-4, weight_decay=0.05, **{impl: True}) for k in kinds if k]

    gen = torch.Generator().manual_seed(0)
    images = ((torch.rand(args.batch_size, 3, args.image_size, args.image_size, generator=gen) - 0.5)
              / math.sqrt(1.0 / 12.0)).to(device)
    if pure:
        images = images.to(torch.bfloat16)
    labels = torch.randint(0, args.num_classes, (args.batch_size,), generator=gen).to(device)

    def train_step():
        loss = run(images, labels)
        for optimizer in optimizers:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return loss

    if use_cuda:
        torch.cuda.reset_peak_memory_stats(device)
    loss = None
    for _ in range(args.warmup_steps):
        loss = train_step()
    ttb.synchronize(device)
    dist.barrier()
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
    ttb.synchronize(device)
    local_seconds = time.perf_counter() - begin
    step_ms = ([events[i].elapsed_time(events[i + 1]) for i in range(args.steps)] if use_cuda
               else [1000.0 * (marks[i + 1] - marks[i]) for i in range(args.steps)])

    def reduce(value, op):
        t = torch.tensor([value], dtype=torch.float64, device=device)
        dist.all_reduce(t, op=op)
        return t.item()

    seconds = reduce(local_seconds, dist.ReduceOp.MAX)
    peak_bytes = torch.cuda.max_memory_allocated(device) if use_cuda else 0
    peak_mem_gib = reduce(float(peak_bytes), dist.ReduceOp.MAX) / 2 ** 30
    # The loss lives on the last stage under pp: its rank reports it.
    final = torch.tensor([float(loss) if loss is not None else -1.0], dtype=torch.float64, device=device)
    dist.all_reduce(final, op=dist.ReduceOp.MAX)
    peak_tflops = args.peak_tflops
    if peak_tflops == 0.0:
        n = args.peak_matmul_size or (8192 if use_cuda else 512)
        tflops, _, _ = ttb.measure_matmul_peak(device, dtype, n, args.peak_seconds)
        peak_tflops = reduce(tflops, dist.ReduceOp.SUM) / world
    _, training_flops = ttb.model_flops(args)
    images_per_s = args.batch_size * args.steps / seconds
    tflops_per_gpu = training_flops * images_per_s / world / 1e12
    if rank == 0:
        kw = ttb.model_kwargs(args)
        record = {
            "framework": "pytorch+timm",
            "hardware": ttb.hardware_name(device),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "commit": args.commit or ttb.git_commit(),
            "command": " ".join(shlex.quote(a) for a in [sys.executable] + sys.argv),
            "torch_version": torch.__version__,
            "plugin": f"torch-{args.mode}",
            "options": {"layout": layout, "schedule": args.schedule if args.mode == "pp" else None,
                        "chunks": args.chunks, "num_microbatches": args.num_microbatches,
                        "sequence_parallel": args.sequence_parallel,
                        "precision_recipe": "pure-bf16" if pure else ("autocast" if autocast_on else "fp32")},
            "precision": args.precision,
            "model": {"name": args.model, "embed_dim": kw["embed_dim"], "depth": kw["depth"],
                      "num_heads": kw["num_heads"], "params": num_params},
            "batch": {"global": args.batch_size, "microbatch": args.batch_size // args.num_microbatches
                      if args.mode == "pp" else args.batch_size},
            "world_size": world,
            "warmup_steps": args.warmup_steps,
            "steps": args.steps,
            "images_per_s": images_per_s,
            "tflops_per_gpu": tflops_per_gpu,
            "mfu": tflops_per_gpu / peak_tflops,
            "peak_tflops": peak_tflops,
            "peak_mem_gib": peak_mem_gib,
            "step_time_ms": {"mean": statistics.fmean(step_ms), "p50": statistics.median(step_ms),
                             "min": min(step_ms), "max": max(step_ms)},
            "final_loss": final.item() if final.item() >= 0 else None,
            "flop_model": ttb.FLOP_MODEL,
        }
        print(f"torch_parallel_bench: {layout} | {args.model} ViT {args.precision} | batch {args.batch_size}")
        print(f"  {images_per_s:.4g} images/s | MFU {100 * record['mfu']:.3g}% | peak mem {peak_mem_gib:.2f} GiB | "
              f"step {record['step_time_ms']['mean']:.1f} ms | loss {record['final_loss']}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(record, f, indent=2)
                f.write("\n")
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
