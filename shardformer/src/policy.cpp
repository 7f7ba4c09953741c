// What every policy answers from its table (policy.h).
#include <colo/nn/layer_stack.h>
#include <colo/nn/model_summary.h>
#include <colo/shardformer/policy.h>
#include <fmt/format.h>

#include <stdexcept>

namespace colo::shardformer {

std::vector<std::string> Policy::problems(const nn::LayerStack& model, int64_t tp_size,
                                          bool sequence_parallel) const {
  return summary_problems(nn::summarize(model), tp_size, sequence_parallel);
}

int64_t Policy::sequence_tokens(const nn::LayerStack& /*model*/) const {
  throw std::invalid_argument(fmt::format(
      "the '{}' policy does not support sequence parallelism (it gives no sequence_tokens): turn it off "
      "(hybrid_parallel: enable_sequence_parallelism=false)",
      name()));
}

bool Policy::matches(const nn::LayerStack& model) const {
  const auto table = plan();
  for (const auto& layer : model.layers()) {
    if (plan_of(table, *layer)) return true;
  }
  return false;
}

bool Policy::knows(const nn::ModelSummary& model) const {
  const auto table = plan();
  for (const auto& layer : model.layers) {
    if (plan_of(table, layer)) return true;
  }
  return false;
}

std::map<std::string, int64_t> Policy::rank_numels(const nn::ModelSummary& model, int64_t tp_size) const {
  return shardformer::rank_numels(plan(), model, tp_size);
}

std::vector<std::string> Policy::plan_problems(const nn::ModelSummary& model, int64_t tp_size,
                                               bool sequence_parallel) const {
  auto found = summary_problems(model, tp_size, sequence_parallel);
  if (found.empty()) found = shape_problems(plan(), model, tp_size);
  return found;
}

}  // namespace colo::shardformer
