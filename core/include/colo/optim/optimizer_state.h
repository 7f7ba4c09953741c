#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <map>
#include <string>
#include <vector>

// Uniform access to any optimizer's learning rates and per-parameter state, for schedulers,
// plugins and checkpoints.
namespace colo::optim {

// Learning rate of parameter group `group` (any torch::optim optimizer, HybridAdam, Lamb).
// Throws std::out_of_range naming the group count when `group` does not exist.
double get_lr(const torch::optim::Optimizer& optimizer, size_t group = 0);
void set_lr(torch::optim::Optimizer& optimizer, size_t group, double lr);

// The parameters the optimizer updates, all groups in order. A parameter's position in this
// list is its index for get_param_state/set_param_state (for an optimizer built over
// module->parameters(), the position in module->named_parameters()).
std::vector<torch::Tensor> optimizer_params(const torch::optim::Optimizer& optimizer);

// One parameter's optimizer state as named tensors, the names PyTorch's state_dict uses:
//   HybridAdam, Lamb, torch Adam/AdamW: "step" (0-dim fp32, as PyTorch saves it), "exp_avg",
//                                       "exp_avg_sq" (and "max_exp_avg_sq" with amsgrad)
//   torch SGD:                          "momentum_buffer" (with momentum)
// Empty before the parameter's first update. The tensors other than "step" are the optimizer's
// own (not copies): save them, don't write into them. Throws std::invalid_argument for other
// optimizers and std::out_of_range for a bad index.
std::map<std::string, torch::Tensor> get_param_state(const torch::optim::Optimizer& optimizer, size_t index);

// Replaces one parameter's state with copies of `state`'s tensors, converted to the parameter's
// device and dtype. Needs exactly the keys get_param_state returns for this optimizer ("step"
// any numeric 0-dim or 1-element tensor); throws std::invalid_argument naming the index and
// the key for a missing, unexpected or wrongly shaped entry.
void set_param_state(torch::optim::Optimizer& optimizer, size_t index,
                     const std::map<std::string, torch::Tensor>& state);

}  // namespace colo::optim
