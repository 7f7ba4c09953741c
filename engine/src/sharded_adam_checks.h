#pragma once

#include <colo/engine/optimizer_wrapper.h>
#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "optimizer_scalars.h"

namespace colo::amp {
class DynamicLossScaler;
}
namespace colo::optim {
struct HybridAdamOptions;
}

namespace colo::detail {

// What the wrappers that keep Adam's state in flat shards (ZeroOptimizer, GeminiOptimizer) share:
// which optimizers they can step, the hyper-parameters they read from them, and the checks of a
// FullState before loading it. Both step every parameter together, so a state is whole or absent
// and carries one step count.

// Throws std::invalid_argument unless `optimizer` is Adam-like (torch's Adam or AdamW, amsgrad
// off, or colo's HybridAdam); `who` (the caller) is named in the message, which lists those it can shard.
void check_adam_like(const torch::optim::Optimizer& optimizer, const std::string& who);

// Each parameter group's Adam hyper-parameters, read from the user's optimizer now (LR schedulers
// keep setting them there).
std::vector<optim::HybridAdamOptions> adam_hyperparameters(const torch::optim::Optimizer& optimizer);

// A FullState checked against the sharded parameters: per parameter exp_avg/exp_avg_sq (empty
// when the state has none), the masters by model-parameter name, the step count, the scalars.
struct ShardedAdamState {
  std::vector<torch::Tensor> exp_avg, exp_avg_sq;  // per sharded parameter; empty vectors: no state
  std::optional<int64_t> step;
  std::map<std::string, torch::Tensor> masters;
  OptimizerScalars scalars;
};

// Checks everything and changes nothing; throws std::invalid_argument naming `who` and listing
// every unknown, missing or mis-shaped entry, mixed presence of state, or differing step counts.
ShardedAdamState check_sharded_adam_state(const OptimizerWrapper::FullState& state,
                                          const std::vector<std::string>& names,
                                          const std::vector<torch::Tensor>& params,
                                          const std::vector<std::string>& model_names,
                                          const std::vector<torch::Tensor>& model_params, bool keep_masters,
                                          const torch::optim::Optimizer& optimizer,
                                          const amp::DynamicLossScaler* scaler, const std::string& who);

}  // namespace colo::detail
