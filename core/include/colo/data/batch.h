#pragma once

#include <torch/types.h>

#include <cstdint>

namespace colo::data {

// One mini-batch: images float [B, C, H, W] and class labels int64 [B], on one device.
struct Batch {
  torch::Tensor images;
  torch::Tensor labels;

  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
};

}  // namespace colo::data
