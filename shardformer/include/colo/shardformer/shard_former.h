#pragma once

#include <colo/shardformer/policy.h>
#include <torch/arg.h>

#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace colo::dist {
class ProcessGroup;
}
namespace colo::nn {
class LayerStack;
}

namespace colo::shardformer {

struct ShardFormerOptions {
  // Split the tokens over the tensor-parallel ranks between the parallel regions.
  TORCH_ARG(bool, sequence_parallel) = false;
  // Seeds the sharded regions' random stream (RngTracker: seed + 2718 + tp rank).
  TORCH_ARG(uint64_t, seed) = 0;
  // Where the model runs (the sharded regions' CUDA stream lives on that GPU).
  TORCH_ARG(c10::Device, device) = c10::Device(c10::kCPU);
};

// Applies a Policy to a layer stack after construction, so that model code stays single-device:
// ShardFormer(tp).shard(*model) picks the policy that matches the model (one added with
// add_policy, then PolicyRegistry::global()'s, then colo's ViT policy) and executes its table for
// this rank: for each row of a layer's type, the sub-module's weight and bias go into the parallel
// linear the row names, which replaces it (nn::Layer::replace_submodule), and the parameters the
// row splits get their ShardSpec; then the policy's add_mappings. Call it on the whole stack,
// before any pipeline cut (a policy may need layers a stage would not hold, e.g. the patch
// embedding's token count for sequence parallelism) and before the parameters are wrapped or cast.
// Throws std::invalid_argument ("tensor parallelism over N ranks: ...") listing `problems` (a
// policy's) when there are any: ShardFormer::shard and hybrid_parallel's memory plan refuse
// through it, in the same words.
void check_problems(const std::vector<std::string>& problems, int64_t tp_size);

class ShardFormer {
 public:
  ShardFormer(std::shared_ptr<dist::ProcessGroup> tp, ShardFormerOptions options = {});

  void add_policy(std::shared_ptr<Policy> policy);
  // The first policy that matches; throws std::invalid_argument naming the policies known and the
  // interface to implement for a model without one.
  const Policy& policy_for(const nn::LayerStack& model) const;
  // Every problem sharding `model` would meet: policy_for's, the policy's own, and the table's
  // (a row naming a sub-module the layer lacks or does not let be replaced, or one that is no
  // linear; where the policy's own find none, sequence parallelism it does not support and
  // splits that do not divide over tp).
  std::vector<std::string> problems(const nn::LayerStack& model) const;
  // Shards `model` in place; throws std::invalid_argument listing every problem first.
  void shard(nn::LayerStack& model) const;

 private:
  std::shared_ptr<dist::ProcessGroup> tp_;
  ShardFormerOptions options_;
  std::vector<std::shared_ptr<Policy>> policies_;
};

}  // namespace colo::shardformer
