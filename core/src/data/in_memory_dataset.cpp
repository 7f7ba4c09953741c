#include <colo/data/in_memory_dataset.h>
#include <fmt/format.h>

#include <stdexcept>

namespace colo::data {

InMemoryDataset::InMemoryDataset(torch::Tensor images, torch::Tensor labels, int64_t num_classes, std::string name,
                                 Normalization normalization, Augmentation augmentation)
    : num_classes_(num_classes),
      name_(std::move(name)),
      normalization_(std::move(normalization)),
      augmentation_(augmentation) {
  if (images.dim() != 4 || images.scalar_type() != torch::kUInt8) {
    throw std::invalid_argument(fmt::format("{}: images must be uint8 [N, C, H, W], got {} {}", name_,
                                            c10::toString(images.scalar_type()), c10::str(images.sizes())));
  }
  if (labels.dim() != 1 || labels.size(0) != images.size(0) || !c10::isIntegralType(labels.scalar_type(), false)) {
    throw std::invalid_argument(fmt::format("{}: labels must be integers [N] with N = {} images, got {} {}", name_,
                                            images.size(0), c10::toString(labels.scalar_type()),
                                            c10::str(labels.sizes())));
  }
  if (images.size(0) == 0) throw std::invalid_argument(fmt::format("{}: no images", name_));
  if (num_classes < 1) throw std::invalid_argument(fmt::format("{}: num_classes must be positive", name_));
  images_ = images.contiguous();
  labels_ = labels.to(torch::kLong).contiguous();
  const int64_t low = labels_.min().item<int64_t>();
  const int64_t high = labels_.max().item<int64_t>();
  if (low < 0 || high >= num_classes) {
    throw std::invalid_argument(
        fmt::format("{}: labels must lie in [0, {}), found values from {} to {}", name_, num_classes, low, high));
  }
  const auto channels = static_cast<size_t>(images_.size(1));
  if (normalization_.mean.size() != channels || normalization_.std.size() != channels) {
    throw std::invalid_argument(fmt::format("{}: normalisation needs {} means and stds, got {} and {}", name_, channels,
                                            normalization_.mean.size(), normalization_.std.size()));
  }
}

ImageShape InMemoryDataset::image_shape() const { return {images_.size(1), images_.size(2), images_.size(3)}; }

Batch InMemoryDataset::get_batch(const std::vector<int64_t>& indices) const {
  for (const int64_t index : indices) {
    if (index < 0 || index >= size()) {
      throw std::out_of_range(fmt::format("{}: sample index {} outside [0, {})", name_, index, size()));
    }
  }
  const auto index = torch::tensor(indices, torch::kLong);
  return {images_.index_select(0, index).to(torch::kFloat).div_(255.0), labels_.index_select(0, index)};
}

}  // namespace colo::data
