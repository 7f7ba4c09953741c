#pragma once

#include <colo/optim/hybrid_adam.h>
#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace colo::optim {

// One Adam/AdamW update, in place, of tensors that share device, dtype and step count, in
// LibTorch's multi-tensor (_foreach_) ops and in torch::optim::AdamW / Adam's order, so with
// their results. For where no fused kernel serves: CUDA on LibTorch < 2.1, bias correction off,
// non-contiguous tensors. `step` starts at 1; hyper-parameters come from `options`.
void adam_step_multi_tensor(std::vector<torch::Tensor>& params, std::vector<torch::Tensor> grads,
                            std::vector<torch::Tensor>& exp_avgs, std::vector<torch::Tensor>& exp_avg_sqs, int64_t step,
                            const HybridAdamOptions& options);

}  // namespace colo::optim
