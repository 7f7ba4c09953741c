#pragma once

#include <torch/types.h>

#include <cstdint>

namespace colo::data {

// One mini-batch: images float [B, C, H, W] and class labels int64 [B], on one device. A loader
// that mixes images (DataLoaderOptions::mixup) also gives the soft targets float [B, classes] the
// criterion is to take; labels stay the images' own.
struct Batch {
  torch::Tensor images;
  torch::Tensor labels;
  torch::Tensor targets{};  // undefined unless mixed

  // What the criterion takes: the soft targets where the batch was mixed, else the labels.
  const torch::Tensor& criterion_targets() const { return targets.defined() ? targets : labels; }

  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
};

}  // namespace colo::data
