#!/usr/bin/env python3
"""Reference outputs of a Hugging Face ViTForImageClassification, for colo's Hugging Face loading.

Builds transformers' ViTForImageClassification from a small ViTConfig (32x32 images, patch 8,
width 32, depth 2, 4 heads, MLP 128, 10 classes; Hugging Face's own LayerNorm eps 1e-12) with a
fixed seed, moves every tensor away from its initial value (a fresh model's biases are 0 and its
LayerNorm weights 1, which would hide a swapped or misplaced tensor), and writes:

  OUT/hf_vit_tiny32/                      save_pretrained's directory: config.json, model.safetensors
                                          (Hugging Face's names, what colo loads)
  OUT/hf_vit_tiny32.reference.safetensors "input" [B, 3, 32, 32], "logits" [B, 10] in eval mode

Everything is fp32 on the CPU.
"""
import argparse
import os
import sys

import torch
import transformers
from safetensors.torch import save_file
from transformers import ViTConfig, ViTForImageClassification


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="output directory (created if missing)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch", type=int, default=3)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    config = ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=32, num_hidden_layers=2,
                       num_attention_heads=4, intermediate_size=128, hidden_act="gelu", qkv_bias=True,
                       num_labels=10)
    model = ViTForImageClassification(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "layernorm" in name and name.endswith(".weight"):
                param.uniform_(0.5, 1.5)
            else:
                param.add_(torch.randn_like(param) * 0.05)
    generator = torch.Generator().manual_seed(args.seed + 1)
    images = torch.randn(args.batch, 3, 32, 32, generator=generator)
    with torch.no_grad():
        logits = model(pixel_values=images).logits

    os.makedirs(args.out, exist_ok=True)
    directory = os.path.join(args.out, "hf_vit_tiny32")
    model.save_pretrained(directory, safe_serialization=True)
    metadata = {"seed": str(args.seed), "torch": torch.__version__, "transformers": transformers.__version__}
    save_file({"input": images.contiguous(), "logits": logits.contiguous()},
              os.path.join(args.out, "hf_vit_tiny32.reference.safetensors"), metadata=metadata)
    print(f"wrote {directory}/ and hf_vit_tiny32.reference.safetensors (transformers {transformers.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
