#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <string>
#include <vector>

namespace colo::nn {
class LayerStack;
}

namespace colo::detail {

// Which of a model's parameters an optimizer steps, matched by tensor identity: what every
// OptimizerWrapper (MixedPrecisionOptimizer, ZeroOptimizer, GeminiOptimizer) establishes first.
struct ParameterMatch {
  // Every model parameter under its canonical name, in canonical (forward) order.
  std::vector<std::string> model_names;
  std::vector<torch::Tensor> model_params;
  // Per optimizer parameter (in the optimizer's groups' order): its index in model_params.
  std::vector<std::size_t> model_index;
  // The model parameters the optimizer steps and that require grad, in canonical order: their
  // model indices and parameter groups. The rest (frozen, or not in the optimizer) is `others`.
  std::vector<std::size_t> stepped;
  std::vector<std::size_t> stepped_group;
  std::vector<std::size_t> others;
};

// Throws std::invalid_argument naming `who` and listing every optimizer parameter that is not a
// parameter of the model (by position and shape), saying to build the optimizer over
// model->parameters().
ParameterMatch match_optimizer_to_model(const nn::LayerStack& model, const torch::optim::Optimizer& optimizer,
                                             const std::string& who);

// The stepped parameters (ParameterMatch::stepped) as a sharded optimizer keeps them: names,
// tensors and parameter groups in canonical order. Throws std::invalid_argument ("<who>: parameter
// 'x' is not floating point") for one it cannot shard.
struct ShardableParameters {
  std::vector<std::string> names;
  std::vector<torch::Tensor> params;
  std::vector<std::size_t> groups;
};
ShardableParameters floating_stepped_parameters(const ParameterMatch& matched, const std::string& who);

// The one rule for a gradient-clipping threshold: finite and >= 0 (0 disables clipping). Empty
// when it holds, else the problem in words.
std::string max_grad_norm_problem(double max_grad_norm);

// Zeroes the gradients of `params` that have one, in one foreach call: the parameters a sharded
// optimizer does not shard (frozen or left out of the optimizer) keep ordinary gradients.
void zero_defined_grads(const std::vector<torch::Tensor>& params);

}  // namespace colo::detail
