#!/usr/bin/env python3
"""How long each GPU operation of a Chrome trace (colo_vit_bench --profile) waited between its launch
and its start, by stream, and where the long waits ended: issue 38 found nvJPEG's internal-stream
kernels held up to a whole training step and released as the training stream's queue drained, the
mark of streams sharing a hardware work queue (CUDA_DEVICE_MAX_CONNECTIONS, 8 by default).

  python3 benchmarks/peers/launch_delays.py trace.json [--long-us 2000]

The training stream is the one with the most kernels. For every other stream: its operations, the
median and largest delay, and how many waited longer than --long-us; for those, how far their start
fell after the end of the last training operation launched before them (a few hundred us at most
when they waited for the training queue).
"""
from __future__ import annotations

import argparse
import bisect
import collections
import json
import statistics


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("trace")
    parser.add_argument("--long-us", type=float, default=2000.0)
    args = parser.parse_args()
    with open(args.trace) as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    ops = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
           and e.get("args", {}).get("correlation") in launches]
    by_stream = collections.defaultdict(list)
    for e in ops:
        by_stream[e["args"].get("stream")].append(e)
    training = max(by_stream, key=lambda s: sum(1 for e in by_stream[s] if e.get("cat") == "kernel"))
    train_ops = sorted(by_stream[training], key=lambda e: launches[e["args"]["correlation"]]["ts"])
    train_launch = [launches[e["args"]["correlation"]]["ts"] for e in train_ops]
    print(f"training stream {training}: {len(train_ops)} operations")
    delays, long_waits = [], []
    for e in ops:
        if e["args"].get("stream") == training:
            continue
        launched = launches[e["args"]["correlation"]]["ts"]
        delay = e["ts"] - launched
        delays.append(delay)
        if delay > args.long_us:
            i = bisect.bisect_left(train_launch, launched) - 1
            after = e["ts"] - (train_ops[i]["ts"] + train_ops[i]["dur"]) if i >= 0 else float("nan")
            long_waits.append((delay, after, e["args"].get("stream"), e.get("name", "?")[:40]))
    if not delays:
        print("no operations on other streams")
        return
    print(f"other streams ({len(by_stream) - 1}): {len(delays)} operations, launch-to-start median "
          f"{statistics.median(delays):.0f} us, largest {max(delays):.0f} us, {len(long_waits)} over {args.long_us:.0f} us")
    for delay, after, stream, name in sorted(long_waits, reverse=True)[:20]:
        print(f"  waited {delay / 1000:8.2f} ms, started {after:8.0f} us after the training op launched before it ended"
              f" (stream {stream}, {name})")


if __name__ == "__main__":
    main()
