#pragma once

// 2.5D tensor parallelism (Tesseract, tp25d_grid.h) for colo's ViT: tp_mode=2.5d's counterpart of
// Vit2dSharder (vit_2d_policy.h), which it follows layer for layer. On the d layers of q×q grids
// every EncoderBlock's norms and linears become LayerNorm2D and Linear2D on this rank's layer
// grid, with the depth group in their options (the same blocks in every layer, their gradients
// summed over the layers: each saw its own share of the batch). The blocks run on this rank's
// block [B/(d·q), S, D/q] of the activations (batch by layer and row, features by column): the
// patch embedding stays whole and replicated and its output is split (split_25d); the classifier
// head's input is gathered back (gather_25d), so every rank ends with the whole logits.
//
// Cuts: the same as 2D's (weights dim 1 by row i then dim 0 by column j; biases and LayerNorms
// dim 0 by column j). The first q² ranks of the tp group (layer 0) hold the distinct blocks in
// unshard's order and the other layers repeat them, as nn::pieces_of's rule reads a list of cuts
// over a group of q²·d ranks: checkpoints gather whole timm-named tensors and the gradient norm
// counts each block once, unchanged.
#include <c10/core/Device.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace colo::nn {
class LayerStack;
struct ModelSummary;
}  // namespace colo::nn

namespace colo::shardformer {

class Tp25dGrid;

struct Vit25dOptions {
  // Refused under 2.5D, as under 2D; asked for so that a caller passing its plugin's setting gets
  // the refusal in words.
  bool sequence_parallel = false;
  // Seeds the blocks' dropout stream (RngTracker: seed + 2718 + tp rank): every rank of the tp
  // group holds a different block of the activations.
  uint64_t seed = 0;
  c10::Device device = c10::Device(c10::kCPU);
};

class Vit25dSharder {
 public:
  // Throws std::invalid_argument for a null grid.
  explicit Vit25dSharder(std::shared_ptr<Tp25dGrid> grid, Vit25dOptions options = {});

  // Every reason `model` cannot be sharded so (Vit2dSharder::problems' list, in the words
  // "tp_mode=2.5d on 2 layers of a 2×2 grid: ..."). Empty when it can.
  std::vector<std::string> problems(const nn::LayerStack& model) const;

  // Shards `model` in place, as Vit2dSharder::shard does (on the whole stack, before any
  // pipeline cut, wrapping or cast). Throws std::invalid_argument ("tensor parallelism over N
  // ranks: ...") listing problems() first.
  void shard(nn::LayerStack& model) const;

  // For memory plans, from a summary: problems() for d layers of a q × q grid, and each split
  // parameter's numel on one rank (2D's at the same q: the layers hold the same blocks).
  static std::vector<std::string> plan_problems(const nn::ModelSummary& model, int64_t q, int64_t depth,
                                                bool sequence_parallel);
  static std::map<std::string, int64_t> rank_numels(const nn::ModelSummary& model, int64_t q);

 private:
  std::shared_ptr<Tp25dGrid> grid_;
  Vit25dOptions options_;
};

}  // namespace colo::shardformer
