#!/usr/bin/env python3
"""Writes OUT/python_sample.safetensors with Hugging Face's `safetensors` package: one small
tensor of every dtype colo supports, with values the C++ test rebuilds on its own, plus a
scalar, an empty tensor and metadata. colo's reader must read it exactly."""
import argparse
import os
import sys

import torch
from safetensors.torch import save_file


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, help="output directory (created if missing)")
    args = parser.parse_args()

    # Values exactly representable in every floating dtype, including bf16 and f16.
    floats = torch.arange(6, dtype=torch.float64).reshape(2, 3) * 0.5 - 1.0
    ints = torch.arange(6, dtype=torch.int64).reshape(2, 3) - 3
    tensors = {
        "f64": floats.clone(),
        "f32": floats.to(torch.float32),
        "f16": floats.to(torch.float16),
        "bf16": floats.to(torch.bfloat16),
        "i64": ints.clone(),
        "i32": ints.to(torch.int32),
        "i16": ints.to(torch.int16),
        "i8": ints.to(torch.int8),
        "u8": (torch.arange(6).reshape(2, 3) * 50).to(torch.uint8),
        "bool": torch.tensor([[True, False, True], [True, False, False]]),
        "scalar": torch.tensor(3.5, dtype=torch.float32),
        "empty": torch.zeros(0, 4, dtype=torch.int64),
    }
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "python_sample.safetensors")
    save_file(tensors, path, metadata={"producer": "python safetensors", "format": "pt"})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
