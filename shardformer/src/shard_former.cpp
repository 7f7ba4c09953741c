#include <colo/dist/process_group.h>
#include <colo/nn/layer_stack.h>
#include <colo/shardformer/policy_registry.h>
#include <colo/shardformer/rng_tracker.h>
#include <colo/shardformer/shard_former.h>
#include <colo/shardformer/vit_policy.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>

namespace colo::shardformer {

ShardFormer::ShardFormer(std::shared_ptr<dist::ProcessGroup> tp, ShardFormerOptions options)
    : tp_(std::move(tp)), options_(options) {
  if (!tp_) throw std::invalid_argument("ShardFormer: the tensor-parallel group is null");
  // The program's own policies first: they may know a model better than a built-in one.
  policies_ = PolicyRegistry::global().policies();
  policies_.push_back(std::make_shared<VitPolicy>());
}

void ShardFormer::add_policy(std::shared_ptr<Policy> policy) {
  if (!policy) throw std::invalid_argument("ShardFormer::add_policy: the policy is null");
  // A user's policy goes first: it may know a model better than a built-in one.
  policies_.insert(policies_.begin(), std::move(policy));
}

const Policy& ShardFormer::policy_for(const nn::LayerStack& model) const {
  std::vector<std::string> names;
  for (const auto& policy : policies_) {
    if (policy->matches(model)) return *policy;
    names.push_back(policy->name());
  }
  throw std::invalid_argument(fmt::format(
      "tensor parallelism: no shardformer policy knows this model (policies: {}); write one for its layers "
      "(colo::shardformer::Policy: docs/adding_a_model_policy.md) and add it with PolicyRegistry::global().add "
      "(or ShardFormer::add_policy), or use tp_size=1",
      fmt::join(names, ", ")));
}

std::vector<std::string> ShardFormer::problems(const nn::LayerStack& model) const {
  try {
    return policy_for(model).problems(model, tp_->size(), options_.sequence_parallel());
  } catch (const std::invalid_argument& e) {
    return {e.what()};
  }
}

void check_problems(const std::vector<std::string>& problems, int64_t tp_size) {
  if (problems.empty()) return;
  throw std::invalid_argument(fmt::format("tensor parallelism over {} ranks: {}", tp_size, fmt::join(problems, "; ")));
}

void ShardFormer::shard(nn::LayerStack& model) const {
  check_problems(problems(model), tp_->size());
  ShardContext context;
  context.tp = tp_;
  context.sequence_parallel = options_.sequence_parallel();
  if (tp_->size() > 1) context.sharded_rng = std::make_shared<RngTracker>(options_.seed(), tp_->rank(), options_.device());
  policy_for(model).shard(model, context);
}

}  // namespace colo::shardformer
