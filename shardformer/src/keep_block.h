#pragma once

// What the 2D modules share when they are built from a whole layer's parameters.
#include <colo/nn/shard_spec.h>
#include <colo/shardformer/tp2d_grid.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <memory>
#include <stdexcept>
#include <vector>

namespace colo::shardformer {

inline std::shared_ptr<Tp2dGrid> require_grid(std::shared_ptr<Tp2dGrid> grid, const char* who) {
  if (!grid) throw std::invalid_argument(fmt::format("{}: the 2D grid is null", who));
  return grid;
}

// Cuts `param` in place to this rank's block: the same tensor keeps its identity (an optimizer
// built over the model still holds it) and its name.
inline void keep_block(torch::Tensor& param, const std::vector<nn::ShardSpec>& cuts, const char* who) {
  torch::NoGradGuard no_grad;
  try {
    param.set_data(nn::shard_of(param.detach(), cuts).clone(at::MemoryFormat::Contiguous));
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(fmt::format("{}: {}", who, e.what()));
  }
}

}  // namespace colo::shardformer
