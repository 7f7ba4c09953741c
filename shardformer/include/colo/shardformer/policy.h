#pragma once

#include <colo/shardformer/shard_plan.h>

#include <cstdint>
#include <map>
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

// What a policy's hooks shard with: the tensor-parallel group, whether the sequence is split too
// (only where tp_size > 1) and over how many real tokens, and the sharded regions' random stream
// (null at tp_size 1).
struct ShardContext {
  std::shared_ptr<dist::ProcessGroup> tp;
  bool sequence_parallel = false;
  int64_t sequence_tokens = 0;
  std::shared_ptr<nn::RegionRng> sharded_rng;
};

// How to shard one family of models (docs/adding_a_model_policy.md walks through writing one).
// Model code stays single-device. A policy is a table, plan(), which ShardFormer executes (each
// row's sub-module swapped for a parallel linear, its split recorded as an nn::ShardSpec on the
// layer) and memory plans read (rank_numels): the two cannot disagree. What a table does not say
// (the communication at the edges of the split regions, dropout's random stream, checks in the
// model's own words) the policy adds through the hooks below, each a no-op by default.
class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string name() const = 0;
  // The table: one LayerPlan per layer type the policy splits.
  virtual ShardPlan plan() const = 0;

  // Every reason the model cannot be sharded so, in the model's words (heads that do not divide
  // over tp_size, ...), each saying what to change; empty when it can. ShardFormer adds the
  // table's own checks (each row's sub-module exists, is replaceable and splits evenly). The
  // default is summary_problems(nn::summarize(model)).
  virtual std::vector<std::string> problems(const nn::LayerStack& model, int64_t tp_size,
                                            bool sequence_parallel) const;
  // problems() for the model a summary describes (heads from LayerSummary::attention_heads), so
  // that a memory plan refuses what boost would. The default finds none.
  virtual std::vector<std::string> summary_problems(const nn::ModelSummary& /*model*/, int64_t /*tp_size*/,
                                                    bool /*sequence_parallel*/) const {
    return {};
  }
  // Sequence parallelism: the real tokens of the model's activations (the parallel linears gather
  // and scatter them). The default throws std::invalid_argument: the policy does not support it.
  virtual int64_t sequence_tokens(const nn::LayerStack& model) const;
  // Runs after the table: the mappings the table does not describe.
  virtual void add_mappings(nn::LayerStack& /*model*/, const ShardContext& /*context*/) const {}

  // Read from plan(), not overridable: whether a model has a layer of a type the table names; a
  // summary's (by structure, plan_of); each parameter's elements per rank (shard_plan.h); and
  // what a memory plan refuses: summary_problems, or when it finds none, the table's shape checks.
  bool matches(const nn::LayerStack& model) const;
  bool knows(const nn::ModelSummary& model) const;
  std::map<std::string, int64_t> rank_numels(const nn::ModelSummary& model, int64_t tp_size) const;
  std::vector<std::string> plan_problems(const nn::ModelSummary& model, int64_t tp_size,
                                         bool sequence_parallel) const;
};

}  // namespace colo::shardformer
