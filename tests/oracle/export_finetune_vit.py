#!/usr/bin/env python3
"""Reference for fine-tuning loads: timm's own pretrained loading at another image size and class count.

Writes, with the `safetensors` package:

  OUT/finetune_vit_tiny.safetensors            a vit_tiny_patch16_224 state_dict (seed 3; biases,
                                               LayerNorms and class token random, randomise.py): the checkpoint
  OUT/finetune_vit_tiny.reference.safetensors  "pos_embed_112" and "pos_embed_384": the position embeddings
                                               timm.create_model(..., img_size=112 or 384, num_classes=5,
                                               pretrained=True) loads from that checkpoint (its
                                               checkpoint_filter_fn resamples them: bicubic, antialiased)
"""
import argparse
import os

import timm
import torch
from safetensors.torch import save_file

from randomise import randomise_constant_tensors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(3)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False)
    randomise_constant_tensors(model)
    # Position embeddings with structure across the grid, so that resampling has something to keep.
    with torch.no_grad():
        model.pos_embed.normal_(0, 0.02)
        model.pos_embed[:, 1:] += torch.linspace(-1, 1, 196).view(1, 196, 1) * torch.randn(1, 1, 192)
    path = os.path.join(args.out, "finetune_vit_tiny.safetensors")
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, path)
    reference = {}
    for size in (112, 384):
        tuned = timm.create_model("vit_tiny_patch16_224", pretrained=True, img_size=size, num_classes=5,
                                  pretrained_cfg_overlay=dict(file=path))
        reference[f"pos_embed_{size}"] = tuned.pos_embed.detach().contiguous()
        # The rest loads unchanged.
        assert torch.equal(tuned.blocks[0].attn.qkv.weight, model.blocks[0].attn.qkv.weight)
    save_file(reference, os.path.join(args.out, "finetune_vit_tiny.reference.safetensors"),
              metadata={"timm": timm.__version__, "torch": torch.__version__})
    print(f"wrote {path} and its reference (timm {timm.__version__})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
