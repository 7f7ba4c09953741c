#!/usr/bin/env python3
"""Predicts the rows of an error table (error_table.py's results.json) again with other profiles,
against the images/s measured there: an A/B of a profiler change without running the layouts again.
Python's standard library only.

  python3 benchmarks/planner/repredict.py --results planner_gpu4/results.json --cluster cluster_4.json \
      --profile A:large=a_large.json,base=a_base.json --profile B:large=b_large.json \
      [--build build] [--gpu-memory-gib 139]

A row whose model a profile lacks, or whose layout the profile cannot price (a tp shard it did not
measure), shows "-" in that column. Prints a markdown table and, per profile, the median and largest
|error| over the rows it priced."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from error_table import CPU_MODEL, GPU_MODELS, model_flags_plan  # noqa: E402  (the models the table measured)


def parse_profile_arg(text):
    name, _, rest = text.partition(":")
    if not rest:
        sys.exit(f"--profile {text}: expected NAME:model=FILE[,model=FILE]")
    files = {}
    for part in rest.split(","):
        model, _, path = part.partition("=")
        if not path:
            sys.exit(f"--profile {text}: expected model=FILE, got '{part}'")
        files[model] = path
    return name, files


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", required=True, help="error_table.py's results.json")
    parser.add_argument("--cluster", help="the cluster file of the measured machine (several ranks)")
    parser.add_argument("--gpu-memory-gib", help="one GPU: its memory (with --gpus-per-node 1)")
    parser.add_argument("--profile", action="append", required=True, help="NAME:model=FILE[,model=FILE]")
    parser.add_argument("--build", default="build")
    args = parser.parse_args()
    plan = os.path.join(args.build, "bin", "colo-plan")
    profiles = [parse_profile_arg(p) for p in args.profile]
    with open(args.results) as f:
        results = json.load(f)
    rows = results["rows"]
    cpu = results.get("preset", "").startswith("cpu")
    models = {"small": CPU_MODEL} if cpu else GPU_MODELS
    precision = "fp32" if cpu else "bf16"
    errors = {name: [] for name, _ in profiles}
    print("| model | layout | global batch | measured images/s | " +
          " | ".join(f"{name} predicted (error)" for name, _ in profiles) + " |")
    print("|---|---|---|---|" + "---|" * len(profiles))
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "explained.json")
        for row in rows:
            cells = []
            for name, files in profiles:
                path = files.get(row["model"])
                if not path:
                    cells.append("-")
                    continue
                command = [plan, *model_flags_plan(models[row["model"]]), "--world-size", str(row["world_size"]),
                           "--global-batch", str(row["global_batch"]), "--precision", precision, "--profile", path,
                           "--explain", row["layout"], "--json", out]
                if row["world_size"] > 1:
                    command += ["--cluster", args.cluster]
                else:
                    command += ["--gpus-per-node", "1"]
                    if args.gpu_memory_gib:
                        command += ["--gpu-memory-gib", args.gpu_memory_gib]
                done = subprocess.run(command, capture_output=True, text=True)
                if done.returncode != 0:
                    cells.append("-")
                    continue
                with open(out) as f:
                    predicted = json.load(f)["explained"][0]["images_per_s"]
                error = (predicted - row["measured_images_per_s"]) / row["measured_images_per_s"]
                errors[name].append(abs(error))
                cells.append(f"{predicted:.1f} ({100 * error:+.1f} %)")
            print(f"| {row['model']} | `{row['layout']}` | {row['global_batch']} | "
                  f"{row['measured_images_per_s']:.1f} | " + " | ".join(cells) + " |")
    print()
    for name, values in errors.items():
        if values:
            print(f"{name}: median |error| {100 * statistics.median(values):.1f} %, largest "
                  f"{100 * max(values):.1f} % over {len(values)} rows")


if __name__ == "__main__":
    main()
