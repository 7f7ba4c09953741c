#pragma once

#include <torch/torch.h>

namespace colo::nn {

// The exact (erf) GELU, timm's nn.GELU(): on CUDA through colo's kernels
// (core/src/kernels/gelu.h: the same fp32 arithmetic as ATen's, 16-byte loads and stores; ATen's
// reached ~2.8 TB/s forward and ~3.4 TB/s backward on an H200 at ViT-B's MLP width), elsewhere
// torch::gelu. Saves its input for the backward, as ATen's does. Differentiable once.
torch::Tensor gelu(const torch::Tensor& input);

// Whether colo's kernels run for this tensor (a test hook): a CUDA fp32, fp16 or bf16 tensor,
// contiguous and 16-byte aligned, in a CUDA build.
bool gelu_uses_colo_kernel(const torch::Tensor& input);

}  // namespace colo::nn
