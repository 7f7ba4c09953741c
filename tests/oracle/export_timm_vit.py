#!/usr/bin/env python3
"""Reference outputs of a timm Vision Transformer, for colo's parity tests.

Creates timm.create_model(MODEL, pretrained=False) with a fixed seed, gives every bias, LayerNorm
and the class token random values (randomise.py: a fresh model's 0s and 1s would hide how they are
applied), runs a fixed random batch through it in eval mode and writes, with the `safetensors`
package:

  OUT/MODEL.safetensors            the model's state_dict (timm names): what colo loads; its
                                   metadata "state_dict_keys" lists the names in timm's order
  OUT/MODEL.reference.safetensors  "input" [B, 3, H, W], "logits" [B, classes]; with --grads
                                   also "labels" (int64 [B]), "loss" (scalar) and "grad.<name>"
                                   for every parameter: gradients of one cross-entropy (mean)
                                   backward pass at those labels

Everything is fp32. On CUDA, TF32 is disabled so that the reference is true fp32.
"""
import argparse
import os
import sys

import torch
import timm
from safetensors.torch import save_file

from randomise import randomise_constant_tensors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="timm model name, e.g. vit_tiny_patch16_224")
    parser.add_argument("--out", required=True, help="output directory (created if missing)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--grads", action="store_true", help="also write labels, loss and parameter gradients")
    parser.add_argument("--device", default="cpu", help="torch device to compute on (cpu, cuda)")
    args = parser.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(args.seed)
    model = timm.create_model(args.model, pretrained=False)
    randomise_constant_tensors(model)
    model = model.to(args.device).eval()
    config = model.pretrained_cfg
    _, height, width = config["input_size"]
    generator = torch.Generator().manual_seed(args.seed + 1)
    images = torch.randn(args.batch, 3, height, width, generator=generator)
    labels = torch.randint(0, model.num_classes, (args.batch,), generator=generator)

    logits = model(images.to(args.device))
    reference = {"input": images, "logits": logits.detach().cpu()}
    if args.grads:
        loss = torch.nn.functional.cross_entropy(logits, labels.to(args.device))
        loss.backward()
        reference["labels"] = labels
        reference["loss"] = loss.detach().cpu()
        for name, param in model.named_parameters():
            reference["grad." + name] = param.grad.detach().cpu()

    os.makedirs(args.out, exist_ok=True)
    metadata = {
        "model": args.model,
        "seed": str(args.seed),
        "device": args.device,
        "torch": torch.__version__,
        "timm": timm.__version__,
    }
    state = {name: t.detach().cpu().contiguous() for name, t in model.state_dict().items()}
    # safetensors stores tensors sorted by dtype and name; keep state_dict()'s order for the tests.
    weights_metadata = dict(metadata, state_dict_keys="\n".join(state))
    save_file(state, os.path.join(args.out, f"{args.model}.safetensors"), metadata=weights_metadata)
    save_file({k: v.contiguous() for k, v in reference.items()},
              os.path.join(args.out, f"{args.model}.reference.safetensors"), metadata=metadata)
    print(f"wrote {args.out}/{args.model}{{,.reference}}.safetensors "
          f"({sum(p.numel() for p in model.parameters())} parameters, batch {args.batch}, grads: {args.grads})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
