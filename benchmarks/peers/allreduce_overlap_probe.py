"""What one data-parallel gradient all-reduce costs on this machine, alone and beside compute.

On power-capped GPUs an all-reduce that overlaps backward is not free even when it is hidden: the
GEMMs beside it can slow down by more than the all-reduce takes alone. This probe measures both,
without colo, so that a communication setting (NCCL environment, buffer registration) can be judged
in seconds before a full benchmark:

  - the all-reduce alone: ``--mib`` of bf16 (default: ViT-B/16's 86 M gradients), averaged;
  - ``--gemms`` 8192^3 bf16 GEMMs alone (about as long as ViT-B/16's backward at batch 256 on an
    H200), twice, and the same GEMMs with one all-reduce launched beside them: the difference is
    what overlapping costs the compute stream.

Each figure is the median of ``--reps`` repetitions, every rank's line printed by rank 0.

  torchrun --nproc-per-node 2 benchmarks/peers/allreduce_overlap_probe.py [--tag NAME]
"""
import argparse

import torch
import torch.distributed as dist


def median_ms(fn, reps):
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        dist.barrier()
        torch.cuda.synchronize()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mib", type=float, default=172e6 / 2**20, help="all-reduce size in MiB of bf16")
    parser.add_argument("--gemms", type=int, default=30, help="8192^3 bf16 GEMMs per timed run")
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--op", choices=["avg", "sum"], default="avg",
                        help="reduction: NCCL turns AVG of floating-point data into a pre-multiplied sum")
    parser.add_argument("--tag", default="-", help="label of the printed lines (e.g. the NCCL settings)")
    args = parser.parse_args()

    dist.init_process_group("nccl")
    rank = dist.get_rank()
    device = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    grads = torch.randn(int(args.mib * 2**20 / 2), device=device, dtype=torch.bfloat16)
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)

    op = dist.ReduceOp.AVG if args.op == "avg" else dist.ReduceOp.SUM

    def all_reduce():
        dist.all_reduce(grads, op=op)

    def gemms():
        for _ in range(args.gemms):
            torch.mm(a, a)

    def gemms_beside_all_reduce():
        # NCCL runs on its own stream: the GEMMs below start while the all-reduce is in flight.
        all_reduce()
        gemms()

    for _ in range(5):
        all_reduce()
    gemms()
    alone = median_ms(lambda: [all_reduce() for _ in range(20)], 5) / 20
    gemm_before = median_ms(gemms, args.reps)
    beside = median_ms(gemms_beside_all_reduce, args.reps)
    gemm_after = median_ms(gemms, args.reps)

    mine = torch.tensor([alone, gemm_before, gemm_after, beside], device=device)
    every = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(every, mine)
    if rank == 0:
        for r, figures in enumerate(every):
            alone, before, after, beside = figures.tolist()
            gemm = (before + after) / 2
            print(f"PROBE [{args.tag}] rank {r}: all-reduce alone {alone:.3f} ms; {args.gemms} GEMMs "
                  f"{before:.2f} / {after:.2f} ms, beside one all-reduce {beside:.2f} ms "
                  f"(+{beside - gemm:.2f} ms)")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
