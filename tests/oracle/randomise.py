"""Moves a freshly created timm model's constant tensors to random values, for the oracles.

A fresh timm ViT has every bias 0, every LayerNorm weight 1 (in any seed) and a class token of
std 1e-6: a reference computed from it cannot tell a bias added in the wrong place, a LayerNorm
affine applied twice or two LayerNorms swapped. export_resnet.py does the same for BatchNorm.
"""
import torch


def randomise_constant_tensors(model: torch.nn.Module) -> None:
    """LayerNorm weights uniform in [0.5, 1.5] and biases in [-0.2, 0.2]; every Linear and Conv2d
    bias uniform in [-0.05, 0.05]; a class token normal with std 0.02 (from the global seed)."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm) and module.elementwise_affine:
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.2, 0.2)
            elif isinstance(module, (torch.nn.Linear, torch.nn.Conv2d)) and module.bias is not None:
                module.bias.uniform_(-0.05, 0.05)
        if isinstance(getattr(model, "cls_token", None), torch.Tensor):
            model.cls_token.normal_(0, 0.02)
