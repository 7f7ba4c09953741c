#pragma once

#include <colo/shardformer/policy.h>

namespace colo::shardformer {

// Tensor parallelism for colo's ViT (Megatron's layout for a transformer block), as a table for
// nn::EncoderBlock:
//   attn.qkv  FusedQkv: each rank keeps heads/tp heads of each of q, k and v
//   attn.proj Row (the heads' outputs summed over the ranks)
//   mlp.fc1   Column;  mlp.fc2 Row
// so a block costs one all-reduce forward and one backward per sub-layer. The patch embedding,
// LayerNorms, biases after a sum and the classifier head are replicated. The head stays whole:
// its output (num_classes logits) is small, and a column-parallel head would add an all-gather
// of the logits for a matrix of D × classes (kept simple; not measured).
// With sequence parallelism, LayerNorm, dropout and the residual adds run on each rank's share of
// the tokens (sequence_mappings.h, padded to a multiple of tp): add_mappings splits the patch
// embedding's output and gathers the head's input (qkv and fc1 all-gather the tokens, proj and
// fc2 reduce-scatter them, from the table); the replicated parameters inside the blocks then see
// only their rank's tokens, so their gradients are summed over the tensor-parallel ranks.
class VitPolicy : public Policy {
 public:
  std::string name() const override { return "vit"; }
  ShardPlan plan() const override;
  // Heads and MLP hidden units that do not divide over tp_size, sequence parallelism without the
  // patch embedding (problems() is this over nn::summarize(model)).
  std::vector<std::string> summary_problems(const nn::ModelSummary& model, int64_t tp_size,
                                            bool sequence_parallel) const override;
  // The patch embedding's token count.
  int64_t sequence_tokens(const nn::LayerStack& model) const override;
  // The blocks' sharded random stream; under sequence parallelism the split and gather at the
  // embedding and the head, and the blocks' partial-sum gradient hooks.
  void add_mappings(nn::LayerStack& model, const ShardContext& context) const override;
};

}  // namespace colo::shardformer
