#!/usr/bin/env python3
"""Reference outputs of timm's AutoAugment / RandAugment ops and RandomErasing (timm 1.0.31,
timm/data/auto_augment.py and random_erasing.py), for colo's augment_test.cpp.

Writes OUT/augment.reference.safetensors:

  op<k>.output        uint8 [C, H, W]: timm's op (NAME_TO_OP with LEVEL_TO_ARG's argument, the
                      sign forced by patching random.random) on image <image>; the metadata's
                      "ops" lists each case as {name, magnitude, negate, resample, image, raised}
  image.rgb / .gray   uint8 [3, 37, 29] and [1, 23, 31]: the random inputs
  ra.op / .magnitude / .negated / .applied
                      timm's rand-m9-mstd0.5-inc1 over N images, its ops' functions replaced by
                      recorders: the index (in the metadata's "ra_names") and magnitude of every op
                      applied, whether its argument was negated, and how many ops each image had
  aa.op / .magnitude / .applied   the same for auto_augment_transform("original")
  re.boxes            int64 [N, 4]: RandomErasing(0.25)'s rectangle (top, left, height, width) on a
                      48 x 64 image, -1 where nothing was erased
  re.<mode>.input / .output / .box
                      one erasing per mode on a random normal [3, 37, 29] image, for exact pixels

Everything is on the CPU.
"""
import argparse
import json
import os
import random
from unittest import mock

import numpy as np
import torch
from PIL import Image
from safetensors.torch import save_file
from timm.data import auto_augment as aa
from timm.data.random_erasing import RandomErasing

OPS = ['AutoContrast', 'Equalize', 'Invert', 'Rotate', 'Posterize', 'PosterizeIncreasing', 'PosterizeOriginal',
       'Solarize', 'SolarizeIncreasing', 'SolarizeAdd', 'Color', 'ColorIncreasing', 'Contrast', 'ContrastIncreasing',
       'Brightness', 'BrightnessIncreasing', 'Sharpness', 'SharpnessIncreasing', 'ShearX', 'ShearY', 'TranslateXRel',
       'TranslateYRel']
GEOMETRIC = {'Rotate', 'ShearX', 'ShearY', 'TranslateXRel', 'TranslateYRel'}
SIGNED = GEOMETRIC | {'ColorIncreasing', 'ContrastIncreasing', 'BrightnessIncreasing', 'SharpnessIncreasing'}
MAGNITUDES = [0.0, 3.0, 5.5, 9.0, 9.7, 10.0]
FILL = (124, 116, 104)  # create_transform's img_mean for ImageNet's mean
HPARAMS = dict(translate_const=100, img_mean=FILL)
SAMPLES = 20000


def pil_image(array):
    """[C, H, W] uint8 to a PIL image (L or RGB)."""
    return Image.fromarray(array[0] if array.shape[0] == 1 else np.transpose(array, (1, 2, 0)))


def chw(image):
    a = np.asarray(image)
    return a[None] if a.ndim == 2 else np.transpose(a, (2, 0, 1))


def op_cases(images):
    tensors, cases = {}, []
    for name in OPS:
        for image_name, array in images.items():
            for magnitude in MAGNITUDES:
                for negate in ([False, True] if name in SIGNED else [False]):
                    for resample in (['bilinear', 'bicubic'] if name in GEOMETRIC else ['bilinear']):
                        fill = FILL if array.shape[0] == 3 else FILL[0]
                        filter_id = Image.Resampling.BILINEAR if resample == 'bilinear' else Image.Resampling.BICUBIC
                        # _randomly_negate negates when random.random() > 0.5.
                        with mock.patch('random.random', return_value=1.0 if negate else 0.0):
                            level_fn = aa.LEVEL_TO_ARG[name]
                            args = level_fn(magnitude, HPARAMS) if level_fn is not None else ()
                        raised = False
                        try:
                            out = aa.NAME_TO_OP[name](pil_image(array), *args, fillcolor=fill, resample=filter_id)
                            out = chw(out)
                        except ValueError:
                            # Pillow 13's posterize refuses 0 bits (PosterizeIncreasing at 10).
                            raised = True
                            out = np.zeros_like(array)
                        k = len(cases)
                        tensors[f'op{k}.output'] = torch.from_numpy(np.array(out, copy=True))
                        cases.append(dict(name=name, magnitude=magnitude, negate=negate, resample=resample,
                                          image=image_name, raised=raised))
    return tensors, cases


def record(policy_ops, names):
    """Replaces each AugmentOp's functions by recorders; returns the log."""
    log = []
    for op in policy_ops:
        level_fn = op.level_fn
        name = op.name

        def level(magnitude, hparams, level_fn=level_fn, name=name):
            args = level_fn(magnitude, hparams) if level_fn is not None else ()
            negated = bool(args) and name in SIGNED and (args[0] < 0 if name in GEOMETRIC else args[0] < 1.0)
            log.append((names.index(name), magnitude, negated))
            return args

        op.level_fn = level
        op.aug_fn = lambda img, *args, **kwargs: img
    return log


def sample(transform, ops, names, prefix):
    log = record(ops, names)
    image = Image.new('RGB', (4, 4))
    applied = []
    for _ in range(SAMPLES):
        before = len(log)
        transform(image)
        applied.append(len(log) - before)
    return {f'{prefix}.op': torch.tensor([e[0] for e in log], dtype=torch.int64),
            f'{prefix}.magnitude': torch.tensor([e[1] for e in log], dtype=torch.float64),
            f'{prefix}.negated': torch.tensor([int(e[2]) for e in log], dtype=torch.int64),
            f'{prefix}.applied': torch.tensor(applied, dtype=torch.int64)}


def erasing():
    tensors = {}
    boxes = []
    eraser = RandomErasing(0.25, mode='const', device='cpu')
    for _ in range(SAMPLES):
        img = torch.ones(3, 48, 64)
        eraser(img)
        zero = (img[0] == 0).nonzero()
        if len(zero) == 0:
            boxes.append([-1, -1, -1, -1])
        else:
            top, left = zero.min(0).values.tolist()
            bottom, right = zero.max(0).values.tolist()
            boxes.append([top, left, bottom - top + 1, right - left + 1])
    tensors['re.boxes'] = torch.tensor(boxes, dtype=torch.int64)
    for mode in ('const', 'rand', 'pixel'):
        eraser = RandomErasing(1.0, mode=mode, device='cpu')
        image = torch.randn(3, 37, 29)
        out = image.clone()
        eraser(out)
        changed = (out != image).any(0).nonzero()
        top, left = changed.min(0).values.tolist()
        bottom, right = changed.max(0).values.tolist()
        tensors[f're.{mode}.input'] = image
        tensors[f're.{mode}.output'] = out
        tensors[f're.{mode}.box'] = torch.tensor([top, left, bottom - top + 1, right - left + 1], dtype=torch.int64)
    return tensors


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--out', required=True)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    # Random pixels in a narrower range than [0, 255], so that autocontrast stretches them.
    images = {'rgb': rng.integers(20, 231, (3, 37, 29), dtype=np.uint8),
              'gray': rng.integers(0, 200, (1, 23, 31), dtype=np.uint8)}
    tensors, cases = op_cases(images)
    tensors['image.rgb'] = torch.from_numpy(images['rgb'])
    tensors['image.gray'] = torch.from_numpy(images['gray'])

    ra = aa.rand_augment_transform('rand-m9-mstd0.5-inc1', dict(HPARAMS))
    tensors.update(sample(ra, ra.ops, list(aa._RAND_INCREASING_TRANSFORMS), 'ra'))
    policy = aa.auto_augment_transform('original', dict(HPARAMS))
    aa_names = sorted({op.name for sub in policy.policy for op in sub})
    tensors.update(sample(policy, [op for sub in policy.policy for op in sub], aa_names, 'aa'))
    tensors.update(erasing())

    metadata = {'ops': json.dumps(cases), 'ra_names': json.dumps(list(aa._RAND_INCREASING_TRANSFORMS)),
                'aa_names': json.dumps(aa_names), 'samples': str(SAMPLES)}
    save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(args.out, 'augment.reference.safetensors'),
              metadata=metadata)
    print(f'wrote {len(cases)} op cases, {SAMPLES} policy and erasing samples to {args.out}')


if __name__ == '__main__':
    main()
