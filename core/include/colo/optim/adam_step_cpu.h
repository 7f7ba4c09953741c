#pragma once

#include <colo/optim/hybrid_adam.h>
#include <torch/types.h>

#include <cstdint>

namespace colo::optim {

// One Adam/AdamW update, in place, of a contiguous fp32 CPU tensor (any shape; typically a flat
// shard of fp32 master weights held on the CPU by ZeRO offload). `step` is the number of this
// update, starting at 1 (it sets the bias corrections 1 - beta^step). Uses lr, betas, eps,
// weight_decay, adamw_mode and bias_correction from `options`; the arithmetic is that of
// torch::optim::AdamW / Adam, element by element:
//   adamw_mode:  p *= 1 - lr * wd                        else: g += wd * p
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g * g
//   p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps)       (bc_i = 1 - beta_i^step, or 1)
// Work is split over LibTorch's intra-op threads (at::parallel_for) in cache-sized chunks.
// Throws std::invalid_argument when a tensor is not a contiguous fp32 CPU tensor of the
// parameter's size, or step < 1.
void adam_step_cpu(const torch::Tensor& param, const torch::Tensor& grad, const torch::Tensor& exp_avg,
                   const torch::Tensor& exp_avg_sq, int64_t step, const HybridAdamOptions& options);

}  // namespace colo::optim
