// timm's RandomErasing._erase, its draws from the image's own stream.
#include <colo/data/random_erasing.h>
#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

#include "seeded_stream.h"

namespace colo::data {
namespace {

// Distinct streams for the rectangle and the values erased into it.
constexpr uint64_t kBoxStream = 0x626f78ULL;
constexpr uint64_t kValueStream = 0x76616cULL;

}  // namespace

const char* to_string(ErasingMode mode) {
  switch (mode) {
    case ErasingMode::kConst:
      return "const";
    case ErasingMode::kRand:
      return "rand";
    case ErasingMode::kPixel:
      return "pixel";
  }
  return "?";
}

ErasingMode erasing_mode_from_string(const std::string& text) {
  if (text == "const") return ErasingMode::kConst;
  if (text == "rand") return ErasingMode::kRand;
  if (text == "pixel") return ErasingMode::kPixel;
  throw std::invalid_argument(fmt::format(
      "random erasing mode \"{}\": write const (erase to 0, the mean colour after normalisation), rand (one normal "
      "value per channel) or pixel (a normal value per pixel), as timm's --remode",
      text));
}

std::optional<ErasingBox> draw_erasing_box(const RandomErasingOptions& o, int64_t height, int64_t width,
                                           uint64_t seed) {
  detail::SeededStream stream(detail::combine_seeds(seed, kBoxStream));
  if (stream.uniform() > o.probability) return std::nullopt;
  const double area = static_cast<double>(height * width);
  const double log_min = std::log(o.min_aspect);
  const double log_max = std::log(1.0 / o.min_aspect);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = stream.uniform(o.min_area, o.max_area) * area;  // count 1
    const double aspect = std::exp(stream.uniform(log_min, log_max));
    // Python's int(round(x)): halves to even.
    const auto h = static_cast<int64_t>(std::nearbyint(std::sqrt(target_area * aspect)));
    const auto w = static_cast<int64_t>(std::nearbyint(std::sqrt(target_area / aspect)));
    if (w < width && h < height) {
      const int64_t top = stream.integer(0, height - h);
      const int64_t left = stream.integer(0, width - w);
      return ErasingBox{top, left, h, w};
    }
  }
  return std::nullopt;
}

void erase_box(torch::Tensor& image, const ErasingBox& box, ErasingMode mode, uint64_t seed) {
  if (image.dim() != 3 || image.scalar_type() != torch::kFloat || !image.is_contiguous()) {
    throw std::invalid_argument("erase_box: expected a contiguous float [C, H, W] image");
  }
  detail::SeededStream stream(detail::combine_seeds(seed, kValueStream));
  const int64_t channels = image.size(0);
  const int64_t height = image.size(1);
  const int64_t width = image.size(2);
  float* data = image.data_ptr<float>();
  for (int64_t c = 0; c < channels; ++c) {
    const float colour = mode == ErasingMode::kRand ? static_cast<float>(stream.normal(0, 1)) : 0.0f;
    for (int64_t y = box.top; y < box.top + box.height; ++y) {
      float* row = data + (c * height + y) * width;
      for (int64_t x = box.left; x < box.left + box.width; ++x) {
        row[x] = mode == ErasingMode::kPixel ? static_cast<float>(stream.normal(0, 1)) : colour;
      }
    }
  }
}

void random_erase(torch::Tensor& image, const RandomErasingOptions& options, uint64_t seed) {
  if (const auto box = draw_erasing_box(options, image.size(1), image.size(2), seed)) {
    erase_box(image, *box, options.mode, seed);
  }
}

}  // namespace colo::data
