#pragma once

#include <colo/nn/fp8_switchable.h>
#include <torch/torch.h>

namespace colo::nn {

// y = input · weightᵀ + bias, as at::linear, with a backward that computes the bias gradient (the
// sum of the output gradient over every token row) as a matrix-vector product with a vector of
// ones: at ViT token counts cuBLAS's product is faster than the column reduction autograd uses.
// The weight and input gradients are the products autograd would compute; a bias-free call has no
// bias gradient. Differentiable once (no double backward). Zero-bubble pipelines defer its weight
// gradient (nn::WeightGradDeferral). Measured: benchmarks/RESULTS.md, "The bias gradient as a
// matrix-vector product".
torch::Tensor linear(const torch::Tensor& input, const torch::Tensor& weight, const torch::Tensor& bias);

// torch::nn::Linear (same options, parameters "weight" and "bias", same init hooks) whose
// forward is colo::nn::linear above, because the C++ frontend's own forward adds the bias of
// [B, T, D] inputs in a separate broadcasting kernel, where at::linear (Python's nn.Linear) makes
// one addmm with the bias in the GEMM's epilogue. Measured: benchmarks/RESULTS.md, "Superseded
// runs", 2026-11-22 "`nn::Linear` through `at::linear`".
// Under precision=fp8 (set_fp8) its bf16 products run through colo::nn::fp8_linear instead.
// gelu(linear(input, weight, bias)) (the MLP's fc1 and its exact GELU) as one autograd step: on a
// GPU (fp32/bf16/fp16 with a bias, out features a multiple of 8 in 16-bit types, of 4 in fp32) the
// GELU's backward kernel sums fc1's bias gradient as it writes its output, instead of the bias
// gradient reading that output again (benchmarks/RESULTS.md, 2026-11-28). Same values as
// gelu(linear(...)) up to the order of the bias gradient's sums; elsewhere exactly that.
torch::Tensor linear_gelu(const torch::Tensor& input, const torch::Tensor& weight, const torch::Tensor& bias);
// Whether linear_gelu fuses for these tensors (tests and the MLP ask).
bool linear_gelu_fuses(const torch::Tensor& input, const torch::Tensor& weight, const torch::Tensor& bias);

class LinearImpl : public torch::nn::LinearImpl, public Fp8SwitchableLayer {
 public:
  using torch::nn::LinearImpl::LinearImpl;

  torch::Tensor forward(const torch::Tensor& input);

  std::pair<int64_t, int64_t> fp8_features() const override { return {options.in_features(), options.out_features()}; }
};

TORCH_MODULE(Linear);

}  // namespace colo::nn
