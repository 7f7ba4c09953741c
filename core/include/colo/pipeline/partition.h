#pragma once

#include <torch/arg.h>

#include <string>
#include <string_view>
#include <vector>

namespace colo::pipeline {

// How partition_layers() cuts a layer stack into stages.
//   kUniform   the same number of layers per stage; the remainder goes to the middle stages (as
//              Colossal-AI does: the first stage also runs the input side and, in 1F1B, holds the
//              most activations; the last also runs the loss).
//   kBalanced  contiguous ranges whose largest total cost (e.g. parameter count or measured time
//              per layer) is the smallest possible; among those, the most even (least sum of
//              squared stage costs, then of squared layer counts). Exact (dynamic programming).
//   kExplicit  the caller's layer count for each stage.
enum class PartitionMethod { kUniform, kBalanced, kExplicit };

// "uniform", "balanced", "explicit".
std::string to_string(PartitionMethod method);
// The reverse of to_string(); anything else throws std::invalid_argument listing the valid names.
PartitionMethod parse_partition_method(std::string_view name);

// Layers [begin, end) of the stack.
struct LayerRange {
  int begin = 0;
  int end = 0;

  int size() const { return end - begin; }
  // "[0, 7)"
  std::string str() const;
  friend bool operator==(const LayerRange& a, const LayerRange& b) { return a.begin == b.begin && a.end == b.end; }
  friend bool operator!=(const LayerRange& a, const LayerRange& b) { return !(a == b); }
};

struct PartitionOptions {
  TORCH_ARG(PartitionMethod, method) = PartitionMethod::kUniform;
  // kBalanced only: one cost per layer of the stack (glued layers included), each finite and >= 0.
  TORCH_ARG(std::vector<double>, layer_costs) = {};
  // kExplicit only: layers per virtual stage, counted after gluing (see glue_last): one entry per
  // stage, each at least 1, summing to the number of layers left after gluing. E.g. {7, 6} for a
  // ViT-B's 14-module stack with glue_last 1.
  TORCH_ARG(std::vector<int>, layers_per_stage) = {};
  // The last `glue_last` layers of the stack always go with the layer before them: the stack is
  // partitioned as num_layers - glue_last layers, the last of which stands for the last
  // glue_last + 1 (its cost their sum). For the ViT, whose stack is [patch embedding, block 0 ..
  // block N-1, head (final norm + head)], glue_last 1 keeps the head with the last block: N + 1
  // layers to place, the patch embedding counting as one.
  TORCH_ARG(int, glue_last) = 0;
  // The first `glue_first` layers always go with the layer after them, as glue_last does at the
  // other end: glue_first 1 keeps the ViT's patch embedding with the first block, so that a uniform
  // cut counts blocks alone.
  TORCH_ARG(int, glue_first) = 0;
};

// How colo's pipelines cut a model's layer stack [input layer, blocks..., output layer] into
// `num_stages` stages (the hybrid_parallel plugin, its memory plan and the layout planner alike):
// the output layer always stays with the last block; under kUniform the input layer goes with the
// first block, so that every stage gets as many blocks as the others (Colossal-AI's rule: neither
// the embedding nor the head is counted). Counting the patch embedding as a layer had given ViT-B's
// two stages 5 and 7 blocks, ViT-L's four 5, 6, 7 and 6. Under kExplicit and kBalanced the input
// layer counts as a layer of its own (explicit counts include it). A stack that would then not
// fill the stages keeps the input layer counted. The method's own inputs (costs, counts) are the
// caller's to add.
PartitionOptions stack_partition_options(PartitionMethod method, int num_layers, int num_stages);

// Cuts a stack of `num_layers` layers into `num_stages` contiguous, non-empty ranges, one per
// virtual stage (pp * chunks of them; stage s is chunk s / pp of rank s % pp), which together
// cover [0, num_layers) in order.
// Throws std::invalid_argument, saying what to change, for fewer layers (after gluing) than
// stages, a glue_last outside [0, num_layers), costs of the wrong count or value, a
// layers_per_stage of the wrong length or sum or with an empty stage, or an option the method
// does not read.
std::vector<LayerRange> partition_layers(int num_layers, int num_stages, const PartitionOptions& options = {});

}  // namespace colo::pipeline
