#pragma once

#include <colo/data/dataset.h>
#include <torch/types.h>

#include <string>

namespace colo::data {

// A data set held entirely in memory as uint8 pixels (Fashion-MNIST's 60k 28×28 images are
// 47 MB; CIFAR-10's 50k are 150 MB), converted to float per batch. Also the way to feed colo
// images that are already in tensors.
class InMemoryDataset : public Dataset {
 public:
  // images: uint8 [N, C, H, W]; labels: any integer type [N], each in [0, num_classes).
  // Throws std::invalid_argument naming the first rule the tensors break.
  InMemoryDataset(torch::Tensor images, torch::Tensor labels, int64_t num_classes, std::string name,
                  Normalization normalization, Augmentation augmentation = {});

  std::string name() const override { return name_; }
  int64_t size() const override { return labels_.size(0); }
  int64_t num_classes() const override { return num_classes_; }
  ImageShape image_shape() const override;
  Batch get_batch(const std::vector<int64_t>& indices) const override;
  Normalization default_normalization() const override { return normalization_; }
  Augmentation default_augmentation() const override { return augmentation_; }

  // The stored pixels, uint8 [N, C, H, W], and labels, int64 [N].
  const torch::Tensor& images() const { return images_; }
  const torch::Tensor& labels() const { return labels_; }

 private:
  torch::Tensor images_;
  torch::Tensor labels_;
  int64_t num_classes_;
  std::string name_;
  Normalization normalization_;
  Augmentation augmentation_;
};

}  // namespace colo::data
