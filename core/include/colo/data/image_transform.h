#pragma once

#include <colo/data/auto_augment.h>
#include <colo/data/dataset.h>
#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace colo::data {

// What the DataLoader does to a batch between the data set and the model, in this order:
//  1. augmentation (random crop with zero padding, random horizontal flip, then timm's
//     RandAugment or AutoAugment on the pixels as bytes) at the data set's resolution, on pixels
//     in [0, 1], so padding is black as in torchvision;
//  2. resize to image_size × image_size (bilinear, as torchvision's Resize) when the model
//     expects another size, e.g. Fashion-MNIST's 28 → 32 for a patch-16 ViT;
//  3. normalisation (x - mean[c]) / std[c];
//  4. channel expansion: a grayscale image repeated into `channels` identical channels, for
//     models built for RGB;
//  5. timm's random erasing, on the normalised image as timm runs it.
// Each image's random choices come from its own seed, so the result does not depend on which
// batch, replica or thread the image is processed in.
class ImageTransform {
 public:
  struct Options {
    Augmentation augmentation;                   // none by default
    int64_t image_size = 0;                      // 0 keeps the input size
    std::optional<Normalization> normalization;  // nullopt: no normalisation
    int64_t channels = 0;                        // 0 keeps the input channels
  };

  // input_shape: the data set's image shape, against which the options are validated; throws
  // std::invalid_argument listing every option that does not fit it.
  ImageTransform(Options options, ImageShape input_shape);

  // images: float [B, C, H, W] of input_shape; sample_seeds: B seeds, one per image (only read
  // when augmenting). Returns a new tensor of output_shape().
  torch::Tensor operator()(const torch::Tensor& images, const std::vector<uint64_t>& sample_seeds) const;

  ImageShape output_shape() const { return output_shape_; }
  const Options& options() const { return options_; }

 private:
  torch::Tensor augment(const torch::Tensor& images, const std::vector<uint64_t>& sample_seeds) const;
  void erase(torch::Tensor& images, const std::vector<uint64_t>& sample_seeds) const;

  Options options_;
  ImageShape input_shape_;
  ImageShape output_shape_;
  torch::Tensor mean_;  // [1, C, 1, 1]
  torch::Tensor std_;
  std::optional<AugmentPolicy> policy_;  // from rand_augment or auto_augment
  FillColor fill_{};                     // the policy's fill: the normalisation mean as bytes
};

}  // namespace colo::data
