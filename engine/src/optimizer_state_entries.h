#pragma once

#include <torch/types.h>

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace colo::detail {

// A tensor's shape as the load errors print it: "[768, 3072]".
std::string shape_of(const torch::Tensor& tensor);

// The tensors of an OptimizerWrapper::FullState (docs/checkpoint_format.md) sorted by what they
// belong to: "master.<model parameter>" (fp32 master weights) and "<optimized parameter>.<state
// key>" (exp_avg, step, ...). Every optimizer wrapper reads its state through this, so that all of
// them accept, refuse and name the same entries in the same words.
struct OptimizerStateEntries {
  std::vector<std::map<std::string, torch::Tensor>> param_states;  // per optimized parameter, by state key
  std::map<std::size_t, torch::Tensor> masters;                     // by model-parameter index
  bool any_master = false;                                          // some "master." entry was given
};

// A wrapper's own check of one "<parameter>.<state key>" entry (e.g. which state keys its
// optimizer has), run before the shape check: an error message, or nullopt to go on.
using StateEntryCheck = std::function<std::optional<std::string>(
    const std::string& key, const std::string& state_key, const torch::Tensor& tensor, const torch::Tensor& param)>;

// Sorts `tensors`, appending every problem to `errors` and changing nothing: names that are
// neither a master of one of `model_names` nor a state of one of `param_names`; shapes (every state
// tensor but "step" has its parameter's shape, a master its model parameter's); and, once any
// master is given, a missing master of any model parameter. With `keep_masters` false (a wrapper
// without master weights) master entries are only noted in any_master: the model state carries the
// weights.
OptimizerStateEntries sort_optimizer_state_entries(const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                                                   const std::vector<std::string>& param_names,
                                                   const std::vector<torch::Tensor>& params,
                                                   const std::vector<std::string>& model_names,
                                                   const std::vector<torch::Tensor>& model_params, bool keep_masters,
                                                   const StateEntryCheck& check, std::vector<std::string>& errors);

}  // namespace colo::detail
