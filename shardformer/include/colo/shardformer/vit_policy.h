#pragma once

#include <colo/shardformer/policy.h>

namespace colo::shardformer {

// Tensor parallelism for colo's ViT (Megatron's layout for a transformer block):
//   attn.qkv  column-parallel, fused: each rank keeps heads/tp heads of each of q, k and v
//   attn.proj row-parallel (the heads' outputs summed over the ranks)
//   mlp.fc1   column-parallel;  mlp.fc2 row-parallel
// so a block costs one all-reduce forward and one backward per sub-layer. The patch embedding,
// LayerNorms, biases after a sum and the classifier head are replicated. The head stays whole:
// its output (num_classes logits) is small, and a column-parallel head would add an all-gather
// of the logits for a matrix of D × classes (kept simple; not measured).
// With sequence parallelism, LayerNorm, dropout and the residual adds run on each rank's share of
// the tokens (sequence_mappings.h, padded to a multiple of tp): the patch embedding's output is
// split, the head's input gathered, qkv and fc1 all-gather the tokens and proj and fc2
// reduce-scatter them; the replicated parameters inside the blocks then see only their rank's
// tokens, so their gradients are summed over the tensor-parallel ranks (a hook on each).
class VitPolicy : public Policy {
 public:
  std::string name() const override { return "vit"; }
  bool matches(const nn::LayerStack& model) const override;
  std::vector<std::string> problems(const nn::LayerStack& model, int64_t tp_size,
                                    bool sequence_parallel) const override;
  void shard(nn::LayerStack& model, const ShardContext& context) const override;
  // A summary with encoder blocks' attn.qkv weights; qkv, proj's weight, fc1 and fc2's weight
  // split over tp, the rest whole.
  bool knows(const nn::ModelSummary& model) const override;
  int64_t rank_numel(const std::string& name, int64_t numel, int64_t tp_size) const override;
  // problems() is this over nn::summarize(model): heads and MLP hidden units that do not divide
  // over tp_size, sequence parallelism without the patch embedding.
  std::vector<std::string> summary_problems(const nn::ModelSummary& model, int64_t tp_size,
                                            bool sequence_parallel) const override;
};

}  // namespace colo::shardformer
