#pragma once

#include <torch/torch.h>

namespace colo::nn {

// y = input · weightᵀ + bias, as at::linear, with a backward that computes the bias gradient (the
// sum of the output gradient over every token row) as a matrix-vector product with a vector of
// ones instead of a column reduction. On an H200 (bf16, 50432 token rows: ViT-B/16 at batch 256)
// cuBLAS's product is 1.1-1.7x as fast as the reduction autograd uses for at::linear (61.6 against
// 36.7 us for 768 columns, 99.7 against 91.3 for 3072; benchmarks/peers/backward_reduction_probe.py):
// about 0.8 ms of a 75 ms training step. The weight and input gradients are the products autograd
// would compute; a bias-free call has no bias gradient. Differentiable once (no double backward).
// Zero-bubble pipelines defer its weight gradient (nn::WeightGradDeferral).
torch::Tensor linear(const torch::Tensor& input, const torch::Tensor& weight, const torch::Tensor& bias);

// torch::nn::Linear (same options, parameters "weight" and "bias", same init hooks) whose
// forward is colo::nn::linear above. The C++ frontend's own forward (torch::nn::functional::linear)
// takes the fused addmm only for 2-D inputs: for tokens [B, T, D] it multiplies and then adds the
// bias in a separate broadcasting kernel. at::linear, which Python's nn.Linear calls (and
// colo::nn::linear's forward), folds [B, T, D] into one addmm, and cuBLASLt adds the bias in the
// GEMM's epilogue. Measured on an H200 (ViT-B/16, bf16, batch 256): the separate adds were 11.6 ms
// of a 91 ms training step.
class LinearImpl : public torch::nn::LinearImpl {
 public:
  using torch::nn::LinearImpl::LinearImpl;

  torch::Tensor forward(const torch::Tensor& input);
};

TORCH_MODULE(Linear);

}  // namespace colo::nn
