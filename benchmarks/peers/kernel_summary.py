#!/usr/bin/env python3
"""Sums the GPU kernel time of Chrome traces (colo_vit_bench --profile, timm_train_bench.py
--profile) by kernel class and by kernel, side by side, to find where one framework spends
time the other does not.

  python3 benchmarks/peers/kernel_summary.py colo=colo.json timm=timm.json [--steps 3] [--top 25]

Times are per training step (the traces hold --steps steps). Kernel classes come from the
kernel names (GEMM, attention, NCCL, optimizer, copies/casts, elementwise, reductions, norms).
"""
from __future__ import annotations

import argparse
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


def load(path: str):
    with open(path) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    kernels = collections.Counter()
    counts = collections.Counter()
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "Kernel", "gpu_memcpy", "gpu_memset"):
            kernels[e["name"]] += float(e.get("dur", 0.0))
            counts[e["name"]] += 1
    return kernels, counts


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("traces", nargs="+", help="label=trace.json")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args(argv)
    runs = []
    for item in args.traces:
        label, _, path = item.partition("=")
        kernels, counts = load(path)
        runs.append((label, kernels, counts))

    labels = [r[0] for r in runs]
    print("## GPU time per step by kernel class (ms)\n")
    print("| class | " + " | ".join(labels) + " |")
    print("|---|" + "---|" * len(labels))
    classes = collections.OrderedDict((c, None) for c, _ in CLASSES + [("other", "")])
    for c in classes:
        row = [sum(d for n, d in k.items() if classify(n) == c) / 1000.0 / args.steps for _, k, _ in runs]
        print(f"| {c} | " + " | ".join(f"{v:.2f}" for v in row) + " |")
    totals = [sum(k.values()) / 1000.0 / args.steps for _, k, _ in runs]
    launches = [sum(c.values()) / args.steps for _, _, c in runs]
    print("| **total** | " + " | ".join(f"**{v:.2f}**" for v in totals) + " |")
    print("| launches/step | " + " | ".join(f"{v:.0f}" for v in launches) + " |")
    for label, kernels, counts in runs:
        print(f"\n## {label}: top {args.top} kernels (ms per step, launches per step)\n")
        for name, dur in kernels.most_common(args.top):
            print(f"- {dur / 1000.0 / args.steps:7.2f} ms  x{counts[name] / args.steps:5.0f}  [{classify(name)}] {short(name)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
