#!/usr/bin/env python3
"""Reference mixes of timm's Mixup (timm/data/mixup.py), for colo's Mixup test (tests/unit/mixup_test.cpp).

For each case (a mode and a set of options, in the metadata as JSON), runs timm.data.Mixup on a
random float batch with NumPy's global generator seeded, while recording every draw timm takes
from it (np.random.rand, beta, randint: the value, with beta's alpha and randint's range). colo
replays the same draws and must give the same mixed images and soft targets to the bit. Writes
OUT/mixup.reference.safetensors:

  case<k>.images / .labels      the batch before mixing ([B, 3, H, W] float32, int64 [B])
  case<k>.mixed / .targets      timm's output
  case<k>.uniform               float64: np.random.rand's values, in call order
  case<k>.beta                  float64 [n, 2]: (alpha, value) of each Beta draw
  case<k>.integer               int64 [n, 3]: (low, high, value) of each randint draw
  case<k>.logits / .loss        random logits and timm's SoftTargetCrossEntropy against the targets
  dist<d>.lam                   float64: lam of 20000 batches (batch mode, correction included) for
                                the statistical comparison of colo's own draws

Everything is on the CPU.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
from safetensors.torch import save_file
from timm.data import Mixup
from timm.loss import SoftTargetCrossEntropy

# (name, options, batch, height, width, mixing on). Each mode with mixup, CutMix and both, the box
# clipped (correct_lam) or not, min/max boxes, a probability that leaves some unmixed, and timm's
# mixup_enabled off (the targets are still smoothed).
CASES = [
    ("batch_mixup", dict(mixup_alpha=0.8, cutmix_alpha=0.0, label_smoothing=0.1), 8, 12, 10, True),
    ("batch_cutmix", dict(mixup_alpha=0.0, cutmix_alpha=1.0, label_smoothing=0.1), 8, 12, 10, True),
    ("batch_cutmix_uncorrected", dict(mixup_alpha=0.0, cutmix_alpha=1.0, correct_lam=False, label_smoothing=0.0),
     6, 9, 13, True),
    ("batch_minmax", dict(mixup_alpha=0.0, cutmix_minmax=(0.2, 0.8), label_smoothing=0.1), 4, 16, 16, True),
    ("batch_both", dict(mixup_alpha=0.8, cutmix_alpha=1.0, switch_prob=0.5, label_smoothing=0.1), 8, 12, 12, True),
    ("batch_off", dict(mixup_alpha=0.8, cutmix_alpha=1.0, label_smoothing=0.1), 4, 8, 8, False),
    ("elem_both", dict(mixup_alpha=0.8, cutmix_alpha=1.0, prob=0.7, mode="elem", label_smoothing=0.1), 16, 11, 14,
     True),
    ("elem_cutmix", dict(mixup_alpha=0.0, cutmix_alpha=0.5, mode="elem", label_smoothing=0.2), 10, 15, 15, True),
    ("elem_minmax", dict(mixup_alpha=0.0, cutmix_minmax=(0.3, 0.9), mode="elem", label_smoothing=0.1), 6, 12, 12,
     True),
    ("pair_both", dict(mixup_alpha=0.4, cutmix_alpha=1.0, prob=0.8, mode="pair", label_smoothing=0.1), 12, 10, 9,
     True),
    ("pair_mixup", dict(mixup_alpha=0.2, cutmix_alpha=0.0, mode="pair", label_smoothing=0.0), 8, 7, 7, True),
]

# Distributions of lam over many batches (batch mode, the box correction at 224x224).
DISTRIBUTIONS = [
    ("deit", dict(mixup_alpha=0.8, cutmix_alpha=1.0, prob=1.0, switch_prob=0.5, label_smoothing=0.1)),
    ("mixup_small_alpha", dict(mixup_alpha=0.2, cutmix_alpha=0.0, prob=0.6, label_smoothing=0.0)),
]
NUM_CLASSES = 7


class Recorder:
    """Wraps np.random's rand, beta and randint, recording what they return."""

    def __init__(self):
        self.uniform, self.beta, self.integer = [], [], []
        self.saved = (np.random.rand, np.random.beta, np.random.randint)

    def __enter__(self):
        rand, beta, randint = self.saved

        def rec_rand(*shape):
            value = rand(*shape)
            self.uniform.extend(np.atleast_1d(value).astype(np.float64).tolist())
            return value

        def rec_beta(a, b, size=None):
            assert a == b
            value = beta(a, b, size=size)
            self.beta.extend([(float(a), float(v)) for v in np.atleast_1d(value)])
            return value

        def rec_randint(low, high=None, size=None):
            assert high is not None and size is None
            value = randint(low, high)
            self.integer.append((int(low), int(high), int(value)))
            return value

        np.random.rand, np.random.beta, np.random.randint = rec_rand, rec_beta, rec_randint
        return self

    def __exit__(self, *exc):
        np.random.rand, np.random.beta, np.random.randint = self.saved


def main() -> int:
    torch.set_num_threads(1)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="output directory (created if missing)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--samples", type=int, default=20000, help="lam samples per distribution")
    args = parser.parse_args()

    tensors, cases = {}, []
    generator = torch.Generator().manual_seed(args.seed)
    for k, (name, options, batch, height, width, enabled) in enumerate(CASES):
        np.random.seed(args.seed + k)
        mixup = Mixup(num_classes=NUM_CLASSES, **options)
        mixup.mixup_enabled = enabled
        images = torch.randn(batch, 3, height, width, generator=generator)
        labels = torch.randint(0, NUM_CLASSES, (batch,), generator=generator)
        with Recorder() as r:
            mixed, targets = mixup(images.clone(), labels.clone())
        logits = torch.randn(batch, NUM_CLASSES, generator=generator)
        p = f"case{k}."
        tensors.update({
            p + "images": images, p + "labels": labels, p + "mixed": mixed, p + "targets": targets,
            p + "uniform": torch.tensor(r.uniform, dtype=torch.float64).reshape(-1),
            p + "beta": torch.tensor(r.beta, dtype=torch.float64).reshape(-1, 2),
            p + "integer": torch.tensor(r.integer, dtype=torch.int64).reshape(-1, 3),
            p + "logits": logits, p + "loss": SoftTargetCrossEntropy()(logits, targets).reshape(1),
        })
        cases.append(dict(name=name, options=options, enabled=enabled))

    for d, (name, options) in enumerate(DISTRIBUTIONS):
        np.random.seed(args.seed + 1000 + d)
        mixup = Mixup(num_classes=NUM_CLASSES, **options)
        x = torch.zeros(2, 1, 224, 224)
        lams = [float(mixup._mix_batch(x)) for _ in range(args.samples)]
        tensors[f"dist{d}.lam"] = torch.tensor(lams, dtype=torch.float64)

    os.makedirs(args.out, exist_ok=True)
    metadata = {"cases": json.dumps(cases), "distributions": json.dumps([dict(name=n, options=o) for n, o in DISTRIBUTIONS]),
                "num_classes": str(NUM_CLASSES), "torch": torch.__version__, "numpy": np.__version__}
    import timm
    metadata["timm"] = timm.__version__
    save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(args.out, "mixup.reference.safetensors"),
              metadata=metadata)
    print(f"wrote {args.out}/mixup.reference.safetensors ({len(CASES)} cases, {len(DISTRIBUTIONS)} distributions)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
