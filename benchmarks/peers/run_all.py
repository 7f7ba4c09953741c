#!/usr/bin/env python3
"""Runs colo_vit_bench and the PyTorch + timm peers back to back on one workload, then writes
the combined table (markdown, with colo/peer ratios) next to every run's JSON and log.

  python3 benchmarks/peers/run_all.py --build-dir build --nproc 8 --model base --batch-size 128 \\
      --precision bf16 --plugins torch_ddp --peers ddp fsdp2 --out results/vit_base_bf16_8gpu

colo runs under colo-run (--nproc-per-node N); multi-GPU peers under
`python3 -m torch.distributed.run --standalone --nproc-per-node N`; eager/compile peers run as
one process (only with --nproc 1). A plugin is given as name[:key=value,key=value] (plugin
options). Each run measures its own matmul peak unless --peak-tflops is given. A run that fails
is listed in the table and does not stop the others; the script then exits 1.

NCCL_NVLS_ENABLE: the GPU machine's environment script exports NCCL_NVLS_ENABLE=0 and it must
stay so (NVLink multicast is off there). This script passes the environment through unchanged,
sets it to 0 only where it is missing, and refuses to run with any other value.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import combine_results  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build-dir", default=os.path.join(REPO, "build-cuda"), help="colo build tree (bin/colo_vit_bench, bin/colo-run)")
    p.add_argument("--nproc", type=int, default=1, help="GPUs (processes) per run")
    p.add_argument("--model", default="base")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--batch-size", type=int, default=64, help="per GPU (per data-parallel replica)")
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="bf16")
    p.add_argument("--warmup-steps", type=int, default=10)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--plugins", nargs="*", default=["torch_ddp"], help="colo plugins: name[:key=value,...]")
    p.add_argument("--peers", nargs="*", choices=["eager", "compile", "ddp", "ddp-compile", "fsdp2", "fsdp2-compile"],
                   help="default: eager compile with --nproc 1, ddp fsdp2 otherwise")
    p.add_argument("--peer-param-dtypes", nargs="+", choices=["fp32", "bf16"], default=["fp32"],
                   help="fp32: autocast / FSDP2 mixed precision (standard); bf16: pure-bf16 parameters too")
    p.add_argument("--peak-tflops", type=float, default=0.0, help="fixed MFU denominator for every run")
    p.add_argument("--peak-matmul-size", type=int)
    p.add_argument("--peak-seconds", type=float)
    p.add_argument("--model-arg", action="append", default=[],
                   help="extra model option for both sides, e.g. --model-arg=--depth=2 (repeatable)")
    p.add_argument("--colo-arg", action="append", default=[], help="extra colo_vit_bench argument (repeatable)")
    p.add_argument("--peer-arg", action="append", default=[], help="extra timm_train_bench argument (repeatable)")
    p.add_argument("--timeout", type=int, default=1800, help="seconds per run")
    p.add_argument("--out", default=os.path.join(REPO, "results", time.strftime("%Y%m%d-%H%M%S")))
    p.add_argument("--dry-run", action="store_true", help="print the commands only")
    args = p.parse_args(argv)
    if args.peers is None:
        args.peers = ["eager", "compile"] if args.nproc == 1 else ["ddp", "fsdp2"]
    single = [m for m in args.peers if m in ("eager", "compile")]
    if single and args.nproc != 1:
        p.error(f"peers {single} run on one GPU; use them with --nproc 1")
    return args


def common_args(args, commit):
    a = ["--model", args.model, "--image-size", str(args.image_size), "--batch-size", str(args.batch_size),
         "--precision", args.precision, "--warmup-steps", str(args.warmup_steps), "--steps", str(args.steps),
         "--commit", commit]
    if args.peak_tflops:
        a += ["--peak-tflops", str(args.peak_tflops)]
    if args.peak_matmul_size:
        a += ["--peak-matmul-size", str(args.peak_matmul_size)]
    if args.peak_seconds:
        a += ["--peak-seconds", str(args.peak_seconds)]
    return a + args.model_arg


def colo_runs(args, commit):
    bench = os.path.join(args.build_dir, "bin", "colo_vit_bench")
    launcher = os.path.join(args.build_dir, "bin", "colo-run")
    for spec in args.plugins:
        name, _, opts = spec.partition(":")
        plugin_opts = [f"--plugin-opt={o}" for o in opts.split(",") if o]
        label = "colo_" + spec.replace(":", "_").replace(",", "_").replace("=", "-")
        json_path = os.path.join(args.out, label + ".json")
        cmd = [launcher, "--nproc-per-node", str(args.nproc), bench, "--plugin", name, *plugin_opts,
               *common_args(args, commit), *args.colo_arg, "--json", json_path]
        yield label, cmd, json_path


def peer_runs(args, commit):
    script = os.path.join(HERE, "timm_train_bench.py")
    for peer in args.peers:
        mode, _, compiled = peer.partition("-")
        for param_dtype in args.peer_param_dtypes:
            if param_dtype == "bf16" and args.precision != "bf16":
                continue
            label = f"timm_{peer}" + ("_pure_bf16" if param_dtype == "bf16" else "")
            json_path = os.path.join(args.out, label + ".json")
            bench_args = [script, "--mode", mode, *(["--compile"] if compiled else []), "--param-dtype", param_dtype,
                          *common_args(args, commit), *args.peer_arg, "--json", json_path]
            if mode in ("ddp", "fsdp2"):
                cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                       str(args.nproc), *bench_args]
            else:
                cmd = [sys.executable, *bench_args]
            yield label, cmd, json_path


def main(argv=None):
    args = parse_args(argv)
    env = dict(os.environ)
    nvls = env.get("NCCL_NVLS_ENABLE")
    if nvls is None:
        env["NCCL_NVLS_ENABLE"] = "0"
    elif nvls != "0":
        raise SystemExit(f"NCCL_NVLS_ENABLE={nvls}: this machine needs NCCL_NVLS_ENABLE=0 (source its env script)")
    os.makedirs(args.out, exist_ok=True)
    commit = combine_results.git_commit()
    runs = list(colo_runs(args, commit)) + list(peer_runs(args, commit))

    done, failures = [], []
    for label, cmd, json_path in runs:
        line = shlex.join(cmd)
        print(f"== {label}: {line}", flush=True)
        if args.dry_run:
            continue
        log_path = os.path.join(args.out, label + ".log")
        begin = time.time()
        with open(log_path, "w") as log:
            try:
                rc = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=args.timeout,
                                    cwd=REPO).returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        elapsed = time.time() - begin
        if rc == 0 and os.path.exists(json_path):
            # The record holds one rank's argv; keep the launcher's full command line with it.
            with open(json_path) as f:
                record = json.load(f)
            record["launch_command"] = line
            with open(json_path, "w") as f:
                json.dump(record, f, indent=2)
                f.write("\n")
            done.append(json_path)
            print(f"   ok in {elapsed:.0f} s -> {json_path}", flush=True)
        else:
            failures.append(f"{label}: exit {rc}, see {log_path}")
            print(f"   FAILED ({rc}) after {elapsed:.0f} s; last lines of {log_path}:", flush=True)
            with open(log_path) as log:
                for tail in log.readlines()[-15:]:
                    print("   | " + tail.rstrip(), flush=True)
    if args.dry_run:
        return 0

    text = combine_results.render(combine_results.load(done), failures)
    table_path = os.path.join(args.out, "table.md")
    with open(table_path, "w") as f:
        f.write(text)
    print(f"\n{text}\n(written to {table_path})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
