#!/usr/bin/env python3
"""Reads a TensorBoard log directory with the `tensorboard` package (the test oracle for colo's
TensorBoardHook) and prints, as JSON, what TensorBoard sees: its runs (one per directory holding
event files), each run's event files with the first event of each (the format's version), and each
run's scalars as [wall_time, step, value] per tag, as TensorBoard's scalar charts load them."""
import argparse
import json
import os
import sys

from tensorboard.backend.event_processing import event_accumulator, event_file_loader, event_multiplexer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("dir", help="the log directory (TensorBoard's --logdir)")
    args = parser.parse_args()

    multiplexer = event_multiplexer.EventMultiplexer(size_guidance={event_accumulator.SCALARS: 0})
    multiplexer.AddRunsFromDirectory(args.dir)
    multiplexer.Reload()
    runs = {}
    for run, run_dir in sorted(multiplexer.RunPaths().items()):
        files = sorted(name for name in os.listdir(run_dir) if "tfevents" in name)
        first_events = []
        for name in files:
            # The raw events, before TensorBoard's conversions; the CRCs are checked as they are read.
            events = list(event_file_loader.LegacyEventFileLoader(os.path.join(run_dir, name)).Load())
            first = events[0] if events else None
            first_events.append({
                "file_version": first.file_version if first is not None else None,
                "step": first.step if first is not None else None,
                "wall_time": first.wall_time if first is not None else None,
                "events": len(events),
            })
        accumulator = multiplexer.GetAccumulator(run)
        scalars = {
            tag: [[e.wall_time, e.step, e.value] for e in accumulator.Scalars(tag)]
            for tag in accumulator.Tags()[event_accumulator.SCALARS]
        }
        runs[run] = {"files": files, "first_events": first_events, "scalars": scalars}
    json.dump({"runs": runs}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
