#!/usr/bin/env python3
"""Predicted (not measured) tables for clusters we do not have: ViT-L/16, ViT-H/14 and the 6.45B
ViT on 8, 64 and 512 H100s with the shipped cluster file (planner/clusters/h100_sxm_8gpu.json),
the hybrid example's 64-GPU choice ranked among the layouts, and how long the searches take
(64 and 1024 GPUs, the 6.45B ViT). Python's standard library only: it runs colo-plan.

  python3 benchmarks/planner/predicted_tables.py [--build build] [--out-dir planner_predicted]
      [--profile MODEL=FILE ...]

Without --profile the compute is analytic (the cluster file's peak and efficiencies). With
--profile large=FILE a measured one-GPU profile prices that model's layers instead; a profile
measured at tp 1 only leaves the tensor-parallel layouts out (the planner rejects them, saying so).
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# The hybrid example's 64-GPU layout (examples/configs/hybrid_vit_64gpu.json): tp 4 x pp 4 x dp 4,
# 1F1B, microbatches = stages, activation checkpointing, zero_stage 0 (its default), global batch 512.
EXAMPLE = "hybrid_parallel dp4 pp4 tp4 zero0 1f1b mb4 ckpt"


def global_batch(model, world):
    # The ViT paper's 4096, except the 6.45B ViT below 512 GPUs: the example's 512.
    return 512 if model == "6.45b" and world < 512 else 4096


def plan(args, model, world, batch, extra=()):
    if model in args.profiles:
        extra = (*extra, "--profile", args.profiles[model])
    out = os.path.join(args.out_dir, f"{model}_{world}.json")
    command = [os.path.join(args.build, "bin", "colo-plan"), "--model", model, "--world-size", str(world),
               "--gpus-per-node", "8", "--gpu-memory-gib", "80", "--global-batch", str(batch), "--precision", "bf16",
               "--out", "", "--json", out, "--top", "3", *extra]
    start = time.time()
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seconds = time.time() - start
    with open(os.path.join(args.out_dir, f"{model}_{world}.txt"), "w") as f:
        f.write(" ".join(command) + "\n" + result.stdout)
    if result.returncode != 0:
        return None, seconds, result.stdout.strip().splitlines()[-1]
    with open(out) as f:
        return json.load(f), seconds, None


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--out-dir", default="planner_predicted")
    parser.add_argument("--profile", action="append", default=[], metavar="MODEL=FILE",
                        help="a measured profile for MODEL (large, huge, 6.45b); repeatable")
    parser.add_argument("--models", default="large,huge,6.45b", help="the models, comma-separated")
    args = parser.parse_args()
    args.profiles = {}
    for item in args.profile:
        model, sep, path = item.partition("=")
        if not sep or not path:
            raise SystemExit(f"--profile {item}: give MODEL=FILE, e.g. --profile large=profile_large.json")
        args.profiles[model] = path
    os.makedirs(args.out_dir, exist_ok=True)
    lines = ["| model | H100s | global batch | best layout (PREDICTED) | images/s | MFU | GiB/GPU | bound by | layouts searched (fit) | search s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    example_line = ""
    models = [m for m in args.models.split(",") if m]
    for model in models:
        for world in [8, 64, 512]:
            batch = global_batch(model, world)
            record, seconds, error = plan(args, model, world, batch)
            if record is None:
                lines.append(f"| {model} | {world} | {batch} | none fits: {error} | | | | | | {seconds:.1f} |")
                continue
            best = record["ranked"][0]
            lines.append(f"| {model} | {world} | {batch} | `{best['layout']}` | {best['images_per_s']:.1f} | "
                         f"{100 * best['mfu']:.1f} % | {best['device_gib']:.1f} | {best['bound']} | "
                         f"{record['searched']} ({len(record['ranked'])}) | {record['search_seconds']:.1f} |")
            if model == "6.45b" and world == 64:
                names = [p["layout"] for p in record["ranked"]]
                if EXAMPLE in names:
                    k = names.index(EXAMPLE)
                    p = record["ranked"][k]
                    example_line = (f"The hybrid example's 64-GPU layout `{EXAMPLE}` ranks {k + 1} of {len(names)} "
                                    f"that fit: {p['images_per_s']:.1f} images/s PREDICTED ({100 * p['mfu']:.1f} % MFU, "
                                    f"{p['device_gib']:.1f} GiB/GPU, bound by {p['bound']}), against the best's "
                                    f"{best['images_per_s']:.1f} ({best['images_per_s'] / p['images_per_s']:.2f}x).")
                else:
                    rejected = [r for r in record["rejected"] if r["layout"] == EXAMPLE]
                    example_line = (f"The hybrid example's 64-GPU layout `{EXAMPLE}` was set aside: "
                                    f"{rejected[0]['reason'] if rejected else 'not enumerated'}.")
    # Search time at 1024 GPUs (the 6.45B ViT, global batch 8192).
    search = ""
    if "6.45b" in models:
        record, seconds, error = plan(args, "6.45b", 1024, 8192)
        search = (f"Search, 6.45B ViT on 1024 H100s (global batch 8192): {record['searched']} layouts in "
                  f"{record['search_seconds']:.1f} s ({seconds:.1f} s with start-up)" if record else
                  f"1024 GPUs: {error}")
    if args.profiles:
        search += "\n\nMeasured profiles: " + ", ".join(f"{m}: {p}" for m, p in sorted(args.profiles.items()))
    text = "\n".join(lines) + "\n\n" + example_line + "\n\n" + search + "\n"
    print(text)
    with open(os.path.join(args.out_dir, "table.md"), "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
