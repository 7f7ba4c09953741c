#!/usr/bin/env python3
"""Sums a Chrome trace's CUDA runtime and driver calls (colo_vit_bench --profile) by thread and
name: which calls a loader thread spends its time in while the training runs beside it (issue 38:
nvjpegDecodeBatched's host call waits six times longer during training, in a call this names).

  python3 benchmarks/peers/api_calls.py trace.json [--top 12]

The training thread is the one that launches the most kernels; every other thread that made CUDA
calls is listed after it, each with its calls' total and longest durations.
"""
from __future__ import annotations

import argparse
import collections
import json


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("trace")
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    with open(args.trace) as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    calls = collections.defaultdict(lambda: collections.defaultdict(list))  # tid -> name -> durations (us)
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in ("cuda_runtime", "cuda_driver"):
            continue
        calls[e.get("tid")][e.get("name", "?")].append(float(e.get("dur", 0)))
    if not calls:
        print("api_calls: no cuda_runtime/cuda_driver events in the trace (CUPTI not recording?)")
        return
    launches = {tid: sum(len(d) for n, d in names.items() if "Launch" in n) for tid, names in calls.items()}
    training = max(launches, key=launches.get)
    for tid in [training] + [t for t in calls if t != training]:
        names = calls[tid]
        total = sum(sum(d) for d in names.values())
        role = "training thread" if tid == training else "other thread"
        print(f"tid {tid} ({role}): {sum(len(d) for d in names.values())} calls, {total / 1000:.2f} ms")
        for name, durations in sorted(names.items(), key=lambda kv: -sum(kv[1]))[: args.top]:
            print(f"  {name:40s} {len(durations):6d} calls {sum(durations) / 1000:9.2f} ms total "
                  f"{max(durations) / 1000:8.2f} ms longest")


if __name__ == "__main__":
    main()
