#!/usr/bin/env python3
"""Sums the GPU kernel time of Chrome traces (colo_vit_bench --profile, timm_train_bench.py
--profile) by kernel class and by kernel, side by side, to find where one framework spends
time the other does not.

  python3 benchmarks/peers/kernel_summary.py colo=colo.json timm=timm.json [--steps 3] [--top 25]

Times are per training step (the traces hold --steps steps). Kernel classes come from the
kernel names (GEMM, attention, NCCL, optimizer, copies/casts, elementwise, reductions, norms).
Each of the top kernels also names the operators that launched it (innermost CPU op, then its
parents, found from the launch's correlation id and the op ranges on the launching thread), which
tells a bias copy in addmm from a copy in a backward function.
"""
from __future__ import annotations

import argparse
import bisect
import collections
import json
import re

CLASSES = [
    ("nccl", r"nccl"),
    ("attention", r"flash|fmha|attention|sdpa|efficient_attention"),
    ("gemm", r"gemm|cutlass|sm90_xmma|nvjet|cublas|xmma|ampere_|hopper_|sm80_|splitk"),
    ("optimizer", r"adam|fused_adamw|multi_tensor_apply_kernel.*(Adam|adam)"),
    ("norm", r"layer_norm|LayerNorm|norm_kernel"),
    ("copy/cast", r"copy|Copy|cast|to_copy|CatArray"),
    ("reduction", r"reduce|Reduce|sum_kernel|norm_two"),
    ("multi-tensor", r"multi_tensor_apply"),
    ("elementwise", r"elementwise|vectorized|unrolled|Elementwise"),
]


def classify(name: str) -> str:
    for label, pattern in CLASSES:
        if re.search(pattern, name):
            return label
    return "other"


def short(name: str, width: int = 90) -> str:
    name = re.sub(r"\s+", " ", name)
    return name if len(name) <= width else name[: width - 3] + "..."


def launching_ops(events):
    """correlation id -> "innermost op < parent < grandparent" for every kernel launch."""
    ops_by_tid = collections.defaultdict(list)
    launches = []
    for e in events:
        if e.get("ph") != "X":
            continue
        if e.get("cat") in ("cpu_op", "user_annotation"):
            ops_by_tid[e.get("tid")].append((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0)), e["name"]))
        elif e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {}):
            launches.append((e.get("tid"), float(e["ts"]), e["args"]["correlation"]))
    starts = {}
    for tid, ops in ops_by_tid.items():
        ops.sort()
        starts[tid] = [o[0] for o in ops]
    chain = {}
    launch_ts = {}
    for tid, ts, corr in launches:
        launch_ts[corr] = ts
        ops = ops_by_tid.get(tid, [])
        # Ops enclosing the launch, outermost first (ops are sorted by start; nesting is by range).
        end = bisect.bisect_right(starts.get(tid, []), ts)
        enclosing = [o for o in ops[max(0, end - 400):end] if o[1] >= ts]
        names = [o[2] for o in reversed(enclosing)][:3]
        chain[corr] = " < ".join(names) if names else "?"
    return chain, launch_ts


def load(path: str):
    with open(path) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    chain, launch_ts = launching_ops(events)
    kernels = collections.Counter()
    counts = collections.Counter()
    origins = collections.defaultdict(collections.Counter)
    nccl, compute = [], []
    spans = []  # (start, end, correlation) of every kernel, for the idle gaps
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "Kernel", "gpu_memcpy", "gpu_memset"):
            kernels[e["name"]] += float(e.get("dur", 0.0))
            counts[e["name"]] += 1
            origins[e["name"]][chain.get(e.get("args", {}).get("correlation"), "?")] += float(e.get("dur", 0.0))
            span = (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0)))
            (nccl if classify(e["name"]) == "nccl" else compute).append(span)
            spans.append((span[0], span[1], e.get("args", {}).get("correlation")))
    first = min(lo for lo, _, _ in spans)
    last = max(hi for _, hi, _ in spans)
    compute = union(compute)
    busy = sum(hi - lo for lo, hi in compute)
    return kernels, counts, origins, exposed_time(nccl, compute), idle_gaps(spans, chain, launch_ts), (last - first, busy)


def idle_gaps(spans, chain, launch_ts):
    """GPU idle time (no kernel on any stream) between the first and last kernel, by the op that
    launched the kernel ending each gap. A gap whose next kernel was launched after the gap began
    is the host falling behind ("late launch"); otherwise the GPU waited on something else (an
    event from another stream, a peer)."""
    spans.sort()
    total = 0.0
    count = 0
    by_origin = collections.Counter()
    late = 0.0
    end = None
    for lo, hi, corr in spans:
        if end is not None and lo > end:
            gap = lo - end
            total += gap
            count += 1
            launched = launch_ts.get(corr)
            kind = "late launch" if launched is not None and launched > end else "waiting"
            if kind == "late launch":
                late += gap
            by_origin[f"{kind}: {chain.get(corr, '?')}"] += gap
        end = hi if end is None else max(end, hi)
    return total, late, by_origin, count


def union(spans):
    """Sorted, disjoint [start, end] intervals covering the same time as `spans`."""
    merged = []
    for lo, hi in sorted(spans):
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return merged


def exposed_time(nccl, merged):
    """Time (us) during which an NCCL kernel runs and no other kernel does: communication that
    nothing hides. `merged`: the compute kernels' union()."""
    busy = union(nccl)
    starts = [m[0] for m in merged]
    exposed = 0.0
    for lo, hi in busy:
        covered = 0.0
        k = max(0, bisect.bisect_right(starts, lo) - 1)
        while k < len(merged) and merged[k][0] < hi:
            covered += max(0.0, min(hi, merged[k][1]) - max(lo, merged[k][0]))
            k += 1
        exposed += (hi - lo) - covered
    return exposed


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("traces", nargs="+", help="label=trace.json")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args(argv)
    runs = []
    for item in args.traces:
        label, _, path = item.partition("=")
        runs.append((label, *load(path)))

    labels = [r[0] for r in runs]
    print("## GPU time per step by kernel class (ms)\n")
    print("| class | " + " | ".join(labels) + " |")
    print("|---|" + "---|" * len(labels))
    classes = collections.OrderedDict((c, None) for c, _ in CLASSES + [("other", "")])
    for c in classes:
        row = [sum(d for n, d in k.items() if classify(n) == c) / 1000.0 / args.steps for _, k, *_ in runs]
        print(f"| {c} | " + " | ".join(f"{v:.2f}" for v in row) + " |")
    totals = [sum(k.values()) / 1000.0 / args.steps for _, k, *_ in runs]
    launches = [sum(c.values()) / args.steps for _, _, c, *_ in runs]
    print("| **total** | " + " | ".join(f"**{v:.2f}**" for v in totals) + " |")
    print("| launches/step | " + " | ".join(f"{v:.0f}" for v in launches) + " |")
    print("| trace span (first kernel start to last kernel end) | " + " | ".join(f"{r[6][0] / 1000.0 / args.steps:.2f}" for r in runs) + " |")
    print("| compute kernels running (union of streams) | " + " | ".join(f"{r[6][1] / 1000.0 / args.steps:.2f}" for r in runs) + " |")
    print("| NCCL alone (no other kernel running) | " + " | ".join(f"{r[4] / 1000.0 / args.steps:.2f}" for r in runs) + " |")
    print("| GPU idle (no kernel running) | " + " | ".join(f"{r[5][0] / 1000.0 / args.steps:.2f}" for r in runs) + " |")
    print("| idle gaps per step | " + " | ".join(f"{r[5][3] / args.steps:.0f}" for r in runs) + " |")
    print("| of which the next kernel was launched late | " + " | ".join(f"{r[5][1] / 1000.0 / args.steps:.2f}" for r in runs) + " |")
    for label, *_, idle, _ in runs:
        print(f"\n## {label}: GPU idle gaps by what ended them (ms per step)\n")
        for origin, gap in idle[2].most_common(12):
            print(f"- {gap / 1000.0 / args.steps:6.2f} ms  {short(origin, 150)}")
    for label, kernels, counts, origins, *_ in runs:
        print(f"\n## {label}: top {args.top} kernels (ms per step, launches per step; launched by)\n")
        for name, dur in kernels.most_common(args.top):
            print(f"- {dur / 1000.0 / args.steps:7.2f} ms  x{counts[name] / args.steps:5.0f}  [{classify(name)}] {short(name)}")
            for origin, odur in origins[name].most_common(2):
                print(f"  - {odur / 1000.0 / args.steps:6.2f} ms from {short(origin, 140)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
