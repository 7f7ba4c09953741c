#pragma once

#include <colo/data/dataset.h>

#include <cstdint>

namespace colo::data {

// Random images and labels for benchmarks and tests, generated on demand (nothing is stored, so
// a 224×224 benchmark data set of any size costs no memory). Sample i depends only on (seed, i):
// the same index always yields the same image and label, whatever batch it is drawn in.
// Pixels are uniform in [0, 1); labels uniform in [0, num_classes).
// Normalisation: mean 0.5, std sqrt(1/12) (the uniform distribution's), so normalised pixels
// have zero mean and unit variance. No default augmentation.
class SyntheticDataset : public Dataset {
 public:
  // Throws std::invalid_argument for a non-positive size, shape dimension or class count.
  SyntheticDataset(int64_t size, ImageShape shape, int64_t num_classes, uint64_t seed = 0);

  std::string name() const override { return "synthetic"; }
  int64_t size() const override { return size_; }
  int64_t num_classes() const override { return num_classes_; }
  ImageShape image_shape() const override { return shape_; }
  Batch get_batch(const std::vector<int64_t>& indices) const override;
  Normalization default_normalization() const override;

 private:
  int64_t size_;
  ImageShape shape_;
  int64_t num_classes_;
  uint64_t seed_;
};

}  // namespace colo::data
