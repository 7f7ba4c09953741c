#pragma once

// 3D tensor parallelism (tp3d_grid.h) for colo's ViT: tp_mode=3d's counterpart of Vit2dSharder
// (vit_2d_policy.h). On a q×q×q cube every EncoderBlock's LayerNorms become LayerNorm3D and its
// linears Linear3D: qkv and fc1 take the outer layout (the residual stream: rows block j·q + k,
// features block i) and give the inner one (rows j·q + i, features k: whole heads, hidden units),
// proj and fc2 take it back. Every activation inside the blocks is one q³-th of the whole
// ([B/q², S, D/q]); the patch embedding stays whole and replicated and its output is split
// (split_3d); the classifier head's input is gathered back (gather_3d), so every rank ends with
// the whole logits.
//
// Cuts (each listed i, j, k, so that the pieces in tp-rank order are unshard's): the linear
// weights' q³ pieces ([out/q, in/q²] outer side, [out/q², in/q] inner side); qkv's and fc1's
// biases dim 0 by k (q pieces, repeated over the ij plane); proj's and fc2's biases and the
// LayerNorms dim 0 by i, j, k (q³ pieces of D/q³). Checkpoints gather whole timm-named tensors and
// the gradient norm counts each piece once, unchanged.
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

class Tp3dGrid;

struct Vit3dOptions {
  // Refused under 3D, as under 2D; asked for so that a caller passing its plugin's setting gets
  // the refusal in words.
  bool sequence_parallel = false;
  // Seeds the blocks' dropout stream (RngTracker: seed + 2718 + tp rank).
  uint64_t seed = 0;
  c10::Device device = c10::Device(c10::kCPU);
};

class Vit3dSharder {
 public:
  // Throws std::invalid_argument for a null cube.
  explicit Vit3dSharder(std::shared_ptr<Tp3dGrid> grid, Vit3dOptions options = {});

  // Every reason `model` cannot be sharded so, in the words "tp_mode=3d on a 2×2×2 cube: ...":
  // heads or MLP hidden units that do not divide by q, an embedding width that does not divide by
  // q³, sequence parallelism, a stack without encoder blocks. Empty when it can.
  std::vector<std::string> problems(const nn::LayerStack& model) const;

  // Shards `model` in place (on the whole stack, before any pipeline cut, wrapping or cast).
  // Throws std::invalid_argument ("tensor parallelism over N ranks: ...") listing problems()
  // first.
  void shard(nn::LayerStack& model) const;

  // For memory plans, from a summary: problems() for a q×q×q cube, and each split parameter's
  // numel on one rank (linear weights, LayerNorms, proj's and fc2's biases 1/q³; qkv's and fc1's
  // biases 1/q).
  static std::vector<std::string> plan_problems(const nn::ModelSummary& model, int64_t q, bool sequence_parallel);
  static std::map<std::string, int64_t> rank_numels(const nn::ModelSummary& model, int64_t q);

 private:
  std::shared_ptr<Tp3dGrid> grid_;
  Vit3dOptions options_;
};

}  // namespace colo::shardformer
