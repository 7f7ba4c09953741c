#pragma once

// 2D tensor parallelism (Optimus/SUMMA, tp2d_grid.h) for colo's ViT: the 1D VitPolicy's
// counterpart for tp_mode=2d. On a q×q grid every EncoderBlock's
//   norm1, norm2           → LayerNorm2D (statistics summed along the grid row; on a 1×1
//                            grid they stay: the same arithmetic, fused)
//   attn.qkv               → Linear2D, parts 3 (column j keeps whole heads of q, k and v)
//   attn.proj, mlp.fc1/fc2 → Linear2D
// so a block runs on this rank's block [B/q, S, D/q] of the activations (batch rows by grid row
// i, features by grid column j), attention over heads/q heads of B/q samples. The patch embedding
// stays whole and replicated; its output is split into the blocks (split_2d). The classifier
// head's input is gathered back (gather_2d), so the final norm and the head stay whole and
// replicated, and every rank ends with the whole logits.
//
// Why a sharder and not a Policy table: ShardFormer's table (shard_plan.h) knows 1D splits of a
// linear over a tp group of tp_size ranks; 2D replaces LayerNorms too, divides by q rather than
// tp_size and records lists of cuts (nn::Layer::shard_cuts). The later table form: Split kinds
// kLinear2D (with parts) and kLayerNorm2D, a Tp2dGrid in the ShardContext, rank_numels and
// shape_problems dividing by q along both cuts, and this file's mappings in a Vit2dPolicy's
// add_mappings; what shard() does here per row is what split_layer would do per kind.
#include <c10/core/Device.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace colo::nn {
class LayerStack;
struct ModelSummary;
}

namespace colo::shardformer {

class Tp2dGrid;

struct Vit2dOptions {
  // Refused under 2D (the activations are already split q×q ways); asked for so that a caller
  // passing its plugin's setting gets the refusal in words.
  bool sequence_parallel = false;
  // Seeds the blocks' dropout stream (RngTracker: seed + 2718 + tp rank): every rank holds a
  // different block of the activations, so each draws its own masks.
  uint64_t seed = 0;
  c10::Device device = c10::Device(c10::kCPU);
};

class Vit2dSharder {
 public:
  // Throws std::invalid_argument for a null grid.
  explicit Vit2dSharder(std::shared_ptr<Tp2dGrid> grid, Vit2dOptions options = {});

  // Every reason `model` cannot be sharded so, each naming the sizes: heads, MLP hidden units or
  // the embedding width that do not divide by q; sequence parallelism; a stack without encoder
  // blocks. Empty when it can.
  std::vector<std::string> problems(const nn::LayerStack& model) const;

  // Shards `model` in place (call it on the whole stack, before any pipeline cut, wrapping or
  // cast): each replaced parameter is cut in place to this rank's block (its name kept) and its
  // cuts recorded on its layer (nn::Layer::set_shard_cuts: weight cuts dim 1 by row i then dim 0
  // by column j, so nn::unshard takes the tp group's blocks in rank order; LayerNorm2D's and the
  // biases' one cut, dim 0 by column j, whose blocks repeat down the column). Throws
  // std::invalid_argument ("tensor parallelism over N ranks: ...") listing problems() first.
  void shard(nn::LayerStack& model) const;

  // What memory plans read, from a summary (nothing built): problems() in the same words for a q
  // x q grid, and each split parameter's numel on one rank by canonical name (the blocks' linear
  // weights 1/q², their biases and LayerNorms 1/q; parameters not listed stay whole).
  static std::vector<std::string> plan_problems(const nn::ModelSummary& model, int64_t q, bool sequence_parallel);
  static std::map<std::string, int64_t> rank_numels(const nn::ModelSummary& model, int64_t q);

 private:
  std::shared_ptr<Tp2dGrid> grid_;
  Vit2dOptions options_;
};

}  // namespace colo::shardformer
