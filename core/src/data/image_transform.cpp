#include <colo/data/image_transform.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "seed_mix.h"

namespace colo::data {
namespace {

// Streams of a sample seed for the policy and the erasing (the crop and flip use the seed itself).
constexpr uint64_t kPolicyStream = 0x706f6c6963ULL;
constexpr uint64_t kErasingStream = 0x6572617365ULL;

}  // namespace

ImageTransform::ImageTransform(Options options, ImageShape input_shape)
    : options_(std::move(options)), input_shape_(input_shape), output_shape_(input_shape) {
  std::vector<std::string> errors;
  const auto channels = static_cast<size_t>(input_shape.channels);
  if (options_.augmentation.crop_padding < 0) {
    errors.push_back(fmt::format("crop_padding must be >= 0, got {}", options_.augmentation.crop_padding));
  }
  if (options_.image_size < 0) {
    errors.push_back(fmt::format("image_size must be >= 0 (0 keeps the size), got {}", options_.image_size));
  }
  if (options_.channels < 0 ||
      (options_.channels > 0 && options_.channels != input_shape.channels && input_shape.channels != 1)) {
    errors.push_back(
        fmt::format("channels = {} does not fit {}-channel images: only a single channel can be "
                    "repeated into several; use 0 to keep the images' channels",
                    options_.channels, input_shape.channels));
  }
  if (const auto& n = options_.normalization) {
    if (n->mean.size() != channels || n->std.size() != channels) {
      errors.push_back(fmt::format("normalisation needs one mean and one std per image channel ({}), got {} and {}",
                                   channels, n->mean.size(), n->std.size()));
    }
    if (!std::all_of(n->std.begin(), n->std.end(), [](double s) { return s > 0.0; })) {
      errors.push_back(fmt::format("normalisation std must be positive, got [{}]", fmt::join(n->std, ", ")));
    }
  }
  const Augmentation& a = options_.augmentation;
  if (!a.rand_augment.empty() && !a.auto_augment.empty()) {
    errors.push_back(fmt::format("rand_augment \"{}\" and auto_augment \"{}\": give one of them (timm applies one)",
                                 a.rand_augment, a.auto_augment));
  }
  try {
    if (!a.rand_augment.empty()) policy_ = AugmentPolicy::rand_augment(a.rand_augment);
    if (!a.auto_augment.empty()) policy_ = AugmentPolicy::auto_augment(a.auto_augment);
  } catch (const std::invalid_argument& e) {
    errors.emplace_back(e.what());
  }
  if (policy_ && input_shape.channels != 1 && input_shape.channels != 3) {
    errors.push_back(fmt::format("{} needs 1- or 3-channel images (PIL's L or RGB), got {}", a.rand_augment + a.auto_augment,
                                 input_shape.channels));
  }
  const RandomErasingOptions& e = a.random_erasing;
  if (!(e.probability >= 0 && e.probability <= 1)) {
    errors.push_back(fmt::format("random_erasing probability must be in [0, 1] (0: off), got {}", e.probability));
  }
  if (!(e.min_area > 0 && e.min_area <= e.max_area && e.max_area <= 1) || !(e.min_aspect > 0 && e.min_aspect <= 1)) {
    errors.push_back(fmt::format("random_erasing needs 0 < min_area <= max_area <= 1 and 0 < min_aspect <= 1, got "
                                 "[{}, {}] and {}",
                                 e.min_area, e.max_area, e.min_aspect));
  }
  if (!errors.empty()) {
    throw std::invalid_argument(fmt::format("ImageTransform for {}x{}x{} images: {}", input_shape.channels,
                                            input_shape.height, input_shape.width, fmt::join(errors, "; ")));
  }
  fill_ = fill_from_mean(options_.normalization ? options_.normalization->mean : std::vector<double>{});
  if (options_.image_size > 0) output_shape_.height = output_shape_.width = options_.image_size;
  if (options_.channels > 0) output_shape_.channels = options_.channels;
  if (const auto& n = options_.normalization) {
    const auto c = input_shape.channels;
    mean_ = torch::tensor(n->mean, torch::kDouble).to(torch::kFloat).view({1, c, 1, 1});
    std_ = torch::tensor(n->std, torch::kDouble).to(torch::kFloat).view({1, c, 1, 1});
  }
}

torch::Tensor ImageTransform::operator()(const torch::Tensor& images, const std::vector<uint64_t>& sample_seeds) const {
  if (images.dim() != 4 || images.size(1) != input_shape_.channels || images.size(2) != input_shape_.height ||
      images.size(3) != input_shape_.width) {
    throw std::invalid_argument(fmt::format("ImageTransform: expected images [B, {}, {}, {}], got {}",
                                            input_shape_.channels, input_shape_.height, input_shape_.width,
                                            c10::str(images.sizes())));
  }
  // Normalisation alone (an ImageFolder's batches, already cropped and resized): one pass in
  // this thread. LibTorch's element-wise ops would start an OpenMP team of all the cores from
  // each loader worker.
  if (!options_.augmentation.enabled() && output_shape_ == input_shape_ && images.is_cpu() && images.is_contiguous() &&
      images.scalar_type() == torch::kFloat) {
    auto out = torch::empty_like(images);
    if (!mean_.defined()) return out.copy_(images);
    const int64_t channels = input_shape_.channels;
    const int64_t plane = input_shape_.height * input_shape_.width;
    const float* source = images.data_ptr<float>();
    float* target = out.data_ptr<float>();
    const float* mean = mean_.data_ptr<float>();
    const float* stdev = std_.data_ptr<float>();
    for (int64_t image = 0; image < images.size(0); ++image) {
      for (int64_t c = 0; c < channels; ++c) {
        const float m = mean[c];
        const float s = stdev[c];
        const int64_t offset = (image * channels + c) * plane;
        // (x - mean) / std, as LibTorch computes it, to the bit.
        for (int64_t i = 0; i < plane; ++i) target[offset + i] = (source[offset + i] - m) / s;
      }
    }
    return out;
  }
  // Images made on a GPU (ImageFolder's nvJPEG decoder) are resized and normalised there; the
  // augmentations work on CPU pixels, so for them the batch comes back to the host (the loader
  // copies the result over again).
  torch::Tensor out = images;
  if (options_.augmentation.enabled() && !images.is_cpu()) out = images.cpu();
  if (options_.augmentation.enabled()) out = augment(out, sample_seeds);
  if (output_shape_.height != input_shape_.height || output_shape_.width != input_shape_.width) {
    namespace F = torch::nn::functional;
    out = F::interpolate(out, F::InterpolateFuncOptions()
                                  .size(std::vector<int64_t>{output_shape_.height, output_shape_.width})
                                  .mode(torch::kBilinear)
                                  .align_corners(false));
  }
  if (mean_.defined()) out = out.is_cpu() ? (out - mean_) / std_ : (out - mean_.to(out.device())) / std_.to(out.device());
  if (output_shape_.channels != input_shape_.channels) out = out.expand({-1, output_shape_.channels, -1, -1});
  if (options_.augmentation.random_erasing.enabled()) {
    out = out.is_same(images) ? images.clone() : out.contiguous();
    erase(out, sample_seeds);
  }
  // A fresh, contiguous tensor either way: the caller may pin it or write to it.
  return out.is_same(images) ? images.clone() : out.contiguous();
}

torch::Tensor ImageTransform::augment(const torch::Tensor& images, const std::vector<uint64_t>& sample_seeds) const {
  const int64_t count = images.size(0);
  if (static_cast<int64_t>(sample_seeds.size()) != count) {
    throw std::invalid_argument(
        fmt::format("ImageTransform: {} images but {} sample seeds", count, sample_seeds.size()));
  }
  const int64_t padding = options_.augmentation.crop_padding;
  const int64_t height = images.size(2);
  const int64_t width = images.size(3);
  const auto offsets = static_cast<uint64_t>(2 * padding + 1);
  const torch::Tensor padded =
      padding > 0 ? torch::constant_pad_nd(images, {padding, padding, padding, padding}, 0.0) : images;
  auto out = torch::empty_like(images);
  for (int64_t i = 0; i < count; ++i) {
    // Three draws from the image's seed: row offset, column offset, flip. The modulo bias is
    // below 2^-50 for any padding in use.
    const uint64_t seed = sample_seeds[static_cast<size_t>(i)];
    const auto top = static_cast<int64_t>(detail::mix64(seed) % offsets);
    const auto left = static_cast<int64_t>(detail::mix64(seed + 1) % offsets);
    const bool flip = options_.augmentation.horizontal_flip && (detail::mix64(seed + 2) & 1) != 0;
    auto crop = padded[i].narrow(1, top, height).narrow(2, left, width);
    out[i].copy_(flip ? crop.flip({2}) : crop);
    if (policy_) {
      // timm's ops on the 8-bit image PIL would hold.
      const torch::Tensor image = out[i].contiguous();
      const ByteImage bytes = to_byte_image(image.data_ptr<float>(), image.size(0), height, width);
      const ByteImage augmented = policy_->apply(bytes, detail::combine_seeds(seed, kPolicyStream), fill_);
      from_byte_image(augmented, out[i].data_ptr<float>());
    }
  }
  return out;
}

void ImageTransform::erase(torch::Tensor& images, const std::vector<uint64_t>& sample_seeds) const {
  for (int64_t i = 0; i < images.size(0); ++i) {
    torch::Tensor image = images[i];
    random_erase(image, options_.augmentation.random_erasing,
                 detail::combine_seeds(sample_seeds[static_cast<size_t>(i)], kErasingStream));
  }
}

}  // namespace colo::data
