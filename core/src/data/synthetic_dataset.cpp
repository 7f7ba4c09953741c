#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <colo/data/synthetic_dataset.h>
#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

#include "seed_mix.h"

namespace colo::data {
namespace {

// Distinct streams for pixels and labels drawn from one seed.
constexpr uint64_t kPixelStream = 0x70697865ULL;
constexpr uint64_t kLabelStream = 0x6c61626cULL;

}  // namespace

SyntheticDataset::SyntheticDataset(int64_t size, ImageShape shape, int64_t num_classes, uint64_t seed)
    : size_(size), shape_(shape), num_classes_(num_classes), seed_(seed) {
  if (size < 1 || shape.channels < 1 || shape.height < 1 || shape.width < 1 || num_classes < 1) {
    throw std::invalid_argument(
        fmt::format("SyntheticDataset: size ({}), image shape ({}x{}x{}) and num_classes ({}) must all be positive",
                    size, shape.channels, shape.height, shape.width, num_classes));
  }
}

Batch SyntheticDataset::get_batch(const std::vector<int64_t>& indices) const {
  const auto count = static_cast<int64_t>(indices.size());
  for (const int64_t index : indices) {
    if (index < 0 || index >= size_) {
      throw std::out_of_range(fmt::format("synthetic: sample index {} outside [0, {})", index, size_));
    }
  }
  auto images = torch::empty({count, shape_.channels, shape_.height, shape_.width}, torch::kFloat);
  auto labels = torch::empty({count}, torch::kLong);
  auto* label_data = labels.data_ptr<int64_t>();
  // One generator per sample keeps each image a function of its index alone; samples are
  // independent, so they are generated in parallel (large benchmark images cost real time).
  at::parallel_for(0, count, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const auto index = static_cast<uint64_t>(indices[i]);
      auto generator = at::make_generator<at::CPUGeneratorImpl>(
          detail::combine_seeds(detail::combine_seeds(seed_, kPixelStream), index));
      images[i].uniform_(0.0, 1.0, generator);
      label_data[i] = static_cast<int64_t>(detail::combine_seeds(detail::combine_seeds(seed_, kLabelStream), index) %
                                           static_cast<uint64_t>(num_classes_));
    }
  });
  return {images, labels};
}

Normalization SyntheticDataset::default_normalization() const {
  const auto channels = static_cast<size_t>(shape_.channels);
  return {std::vector<double>(channels, 0.5), std::vector<double>(channels, std::sqrt(1.0 / 12.0))};
}

}  // namespace colo::data
