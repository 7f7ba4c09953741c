#!/usr/bin/env python3
"""Reference outputs of timm's resnet18 (torchvision's names and structure), for colo's ResNet parity test.

Creates timm.create_model("resnet18", num_classes=10) with a fixed seed, gives every BatchNorm
random weights, biases and running statistics (so that no 1 or 0 hides a mistake), and writes:

  OUT/resnet18.safetensors            the state_dict before anything runs (what colo loads)
  OUT/resnet18.reference.safetensors  "input" [B, 3, 64, 64], "labels"; one train-mode step:
                                      "train_logits", "loss" (cross-entropy mean), "grad.<name>"
                                      for every parameter and "after.<buffer>" for every buffer
                                      (running statistics moved once, num_batches_tracked 1);
                                      then "eval_logits": eval mode on the same input

Everything is fp32 on the CPU.
"""
import argparse
import os
import sys

import torch
import timm
from safetensors.torch import save_file


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="output directory (created if missing)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch", type=int, default=4)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    model = timm.create_model("resnet18", pretrained=False, num_classes=10)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.2, 0.2)
                module.running_mean.uniform_(-0.1, 0.1)
                module.running_var.uniform_(0.5, 2.0)
    state = {name: t.detach().clone().contiguous() for name, t in model.state_dict().items()}

    generator = torch.Generator().manual_seed(args.seed + 1)
    images = torch.randn(args.batch, 3, 64, 64, generator=generator)
    labels = torch.randint(0, 10, (args.batch,), generator=generator)
    model.train()
    logits = model(images)
    loss = torch.nn.functional.cross_entropy(logits, labels)
    loss.backward()
    reference = {"input": images, "labels": labels, "train_logits": logits.detach(), "loss": loss.detach()}
    for name, param in model.named_parameters():
        reference["grad." + name] = param.grad.detach()
    for name, buffer in model.named_buffers():
        reference["after." + name] = buffer.detach()
    model.eval()
    with torch.no_grad():
        reference["eval_logits"] = model(images)

    os.makedirs(args.out, exist_ok=True)
    metadata = {"model": "resnet18", "seed": str(args.seed), "torch": torch.__version__, "timm": timm.__version__}
    save_file(state, os.path.join(args.out, "resnet18.safetensors"),
              metadata=dict(metadata, state_dict_keys="\n".join(state)))
    save_file({k: v.contiguous() for k, v in reference.items()},
              os.path.join(args.out, "resnet18.reference.safetensors"), metadata=metadata)
    print(f"wrote {args.out}/resnet18{{,.reference}}.safetensors (batch {args.batch})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
