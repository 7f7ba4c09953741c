#!/usr/bin/env python3
"""Writes a profile (colo-plan profile's JSON) whose small micro-batch points are modelled rather
than measured: per layer and field, max(the line through the two largest sizes' points, a host
floor), the floor being the least time measured at the smaller sizes. An offline experiment for
issue 43 (blocks below ~64 images are host-bound on an H100/H200 and their profiled times move by
±25 % from run to run); feed the result to repredict.py beside the recorded profile:

  python3 benchmarks/planner/host_floor_profile.py IN.json OUT.json [--floor min|median]

Python's standard library only."""
import argparse
import json
import statistics

FIELDS = ["forward_s", "backward_s", "input_grad_s", "weight_grad_s", "checkpointed_forward_s",
          "checkpointed_backward_s"]


def model_small_points(profile, floor_kind):
    for layer in profile["layers"]:
        points = layer["points"]
        if len(points) < 3:
            continue
        a, b = points[-2], points[-1]
        for field in FIELDS:
            if field not in a:
                continue
            slope = (b[field] - a[field]) / (b["samples"] - a["samples"])
            intercept = a[field] - slope * a["samples"]
            small = [p[field] for p in points if p["samples"] < a["samples"]]
            floor = min(small) if floor_kind == "min" else statistics.median(small)
            for p in points:
                if p["samples"] < a["samples"]:
                    p[field] = max(slope * p["samples"] + intercept, floor, 0.0)
    return profile


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("input")
    parser.add_argument("output")
    parser.add_argument("--floor", choices=["min", "median"], default="min")
    args = parser.parse_args()
    with open(args.input) as f:
        profile = json.load(f)
    profile["description"] = (profile.get("description", "") +
                              f" [small sizes modelled by host_floor_profile.py, floor {args.floor}]").strip()
    with open(args.output, "w") as f:
        json.dump(model_small_points(profile, args.floor), f, indent=1)


if __name__ == "__main__":
    main()
