#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace colo::dist {
class ProcessGroup;
}
namespace colo::nn {
class LayerStack;
class RegionRng;
struct ModelSummary;
}  // namespace colo::nn

namespace colo::shardformer {

// What a policy shards with: the tensor-parallel group, whether to split the sequence too, and
// the random stream of the sharded regions.
struct ShardContext {
  std::shared_ptr<dist::ProcessGroup> tp;
  bool sequence_parallel = false;
  std::shared_ptr<nn::RegionRng> sharded_rng;
};

// How to shard one family of models (docs/adding_a_model_policy.md walks through writing one).
// Model code stays single-device: a policy rewrites a model after construction, replacing
// sub-modules with parallel ones (which keep the replaced modules' parameter names), recording
// each split parameter's nn::ShardSpec on its layer (optimizers, the gradient norm and checkpoints
// read them), and putting in the communication the layout needs.
class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string name() const = 0;
  // Whether the policy knows this model (its layers' types).
  virtual bool matches(const nn::LayerStack& model) const = 0;
  // Every reason the model cannot be sharded so (heads that do not divide by tp_size, ...), each
  // saying what to change; empty when it can.
  virtual std::vector<std::string> problems(const nn::LayerStack& model, int64_t tp_size,
                                            bool sequence_parallel) const = 0;
  // Shards the model in place for this rank (problems() is empty).
  virtual void shard(nn::LayerStack& model, const ShardContext& context) const = 0;

  // For memory plans (Booster::plan_memory), which have no model: whether the policy knows the
  // model a summary describes, and how many elements of parameter `name` (canonical, `numel`
  // elements) one rank holds once sharded over tp_size ranks. The defaults know no model.
  virtual bool knows(const nn::ModelSummary& /*model*/) const { return false; }
  virtual int64_t rank_numel(const std::string& /*name*/, int64_t numel, int64_t /*tp_size*/) const { return numel; }
  // problems() for the model a summary describes (heads from LayerSummary::attention_heads): a
  // memory plan refuses what boost would. A policy whose problems() needs only shapes can
  // implement problems() through this (VitPolicy does, so that the two cannot drift). The default
  // finds none.
  virtual std::vector<std::string> summary_problems(const nn::ModelSummary& /*model*/, int64_t /*tp_size*/,
                                                    bool /*sequence_parallel*/) const {
    return {};
  }
};

}  // namespace colo::shardformer
