#!/usr/bin/env python3
"""Tabulates colo_vit_bench and timm_train_bench JSON records (markdown) with colo/peer ratios.

  python3 benchmarks/peers/combine_results.py results/*.json > results/table.md

Records of different workloads (model dims, image size, per-replica batch, world size,
precision) are not comparable: they are grouped, one table per workload. Within a group every
colo run is divided by every peer run: images/s ratio (> 1: colo faster) and peak-memory ratio
(< 1: colo leaner). MFU is shown per run against that run's own measured peak.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import OrderedDict


def git_commit():
    """The checkout's commit (12 hex digits), with -dirty when tracked files have changed.

    COLO_COMMIT overrides it: a copy of the tree on another machine (the GPU machine's) may
    carry stale git metadata, so the session that sent it names the commit instead."""
    if os.environ.get("COLO_COMMIT"):
        return os.environ["COLO_COMMIT"]
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=here, capture_output=True,
                                text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True).stdout.strip()
        return commit + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def load(paths):
    records = []
    for path in paths:
        with open(path) as f:
            record = json.load(f)
        record["_path"] = path
        records.append(record)
    return records


def workload_key(r):
    m = r["model"]
    return (m["name"], m["image_size"], m["patch_size"], m["embed_dim"], m["depth"], m["num_heads"],
            r["batch"]["per_replica"], r["world_size"], r["precision"])


def workload_title(r):
    m = r["model"]
    return (f"ViT {m['name']} (D={m['embed_dim']}, L={m['depth']}, heads={m['num_heads']}, patch {m['patch_size']}, "
            f"{m['image_size']}px, {m['params'] / 1e6:.1f}M params), {r['precision']}, batch {r['batch']['per_replica']}"
            f" per replica, world size {r['world_size']}")


def run_label(r):
    if r["framework"] == "colo":
        opts = {k: v for k, v in r["options"].items() if k != "precision"}
        extra = ",".join(f"{k}={v}" for k, v in sorted(opts.items()))
        return f"colo {r['plugin']}" + (f" ({extra})" if extra else "")
    return f"{r['plugin']} ({r['options']['precision_recipe']})"


def fmt(x, spec):
    return "—" if x is None else format(x, spec)


def table(records):
    out = []
    hdr = "| run | global batch | images/s | TFLOP/s/GPU | MFU | peak TFLOP/s | peak mem GiB | step ms mean / p50 |"
    out += [hdr, "|" + "---|" * 8]
    for r in records:
        st = r["step_time_ms"]
        out.append(f"| {run_label(r)} | {r['batch']['global']} | {r['images_per_s']:.1f} | {r['tflops_per_gpu']:.3g} "
                   f"| {100 * r['mfu']:.1f}% | {r['peak_tflops']:.4g} | {r['peak_mem_gib']:.2f} "
                   f"| {st['mean']:.1f} / {st['p50']:.1f} |")
    colo = [r for r in records if r["framework"] == "colo"]
    peers = [r for r in records if r["framework"] != "colo"]
    if colo and peers:
        out += ["", "colo / peer: images/s ratio (> 1: colo faster); peak memory ratio in brackets (< 1: colo leaner)", ""]
        out.append("| colo run | " + " | ".join(run_label(p) for p in peers) + " |")
        out.append("|---|" + "---|" * len(peers))
        for c in colo:
            cells = [f"{c['images_per_s'] / p['images_per_s']:.2f} ({c['peak_mem_gib'] / p['peak_mem_gib']:.2f})"
                     for p in peers]
            out.append(f"| {run_label(c)} | " + " | ".join(cells) + " |")
    return out


def render(records, failures=()):
    lines = ["# ViT training throughput: colo vs PyTorch + timm", ""]
    hardware = sorted({r["hardware"] for r in records})
    commits = sorted({r["commit"] for r in records})
    dates = sorted(r["date"] for r in records)
    torch_versions = sorted({r["torch_version"] for r in records})
    lines += [f"- hardware: {', '.join(hardware) or '—'}",
              f"- date: {dates[0] if dates else '—'} … {dates[-1] if dates else '—'} (UTC)",
              f"- commit: {', '.join(commits) or '—'}",
              f"- LibTorch / PyTorch: {', '.join(torch_versions) or '—'}"]
    if records:
        r0 = records[0]
        lines += [f"- FLOP model: {r0['flop_model']}",
                  f"- MFU: {r0['mfu_definition']}",
                  f"- steps: {r0['warmup_steps']} warm-up + {r0['steps']} timed; synthetic data on the device",
                  f"- peak memory: {r0['peak_mem_method']}"]
    groups = OrderedDict()
    for r in records:
        groups.setdefault(workload_key(r), []).append(r)
    for group in groups.values():
        gflops = {round(r["forward_gflops_per_image"], 6) for r in group}
        lines += ["", f"## {workload_title(group[0])}", ""]
        if len(gflops) > 1:
            lines += [f"**FLOP models disagree within this group: {sorted(gflops)} forward GFLOPs per image**", ""]
        lines += [f"Forward {group[0]['forward_gflops_per_image']:.4g} GFLOPs per image; training 3×.", ""]
        lines += table(group)
    if failures:
        lines += ["", "## Runs that failed", ""] + [f"- `{f}`" for f in failures]
    lines += ["", "Commands:", ""] + [f"- `{r.get('launch_command', r['command'])}`" for r in records]
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("json", nargs="+", help="result records")
    p.add_argument("--out", help="write the markdown here (default: stdout)")
    args = p.parse_args(argv)
    text = render(load(args.json))
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
