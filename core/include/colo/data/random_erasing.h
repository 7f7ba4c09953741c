// timm's RandomErasing (timm/data/random_erasing.py, timm 1.0.31): with probability p, a
// rectangle of area share in [min_area, max_area) and log aspect ratio (height / width) uniform in
// [log min_aspect, log 1/min_aspect] is erased, up to 10 attempts to fit it; one rectangle per
// image (timm's count 1). As in timm it runs on the normalised image, so 'const' erases to 0 (the
// mean colour) and 'rand' / 'pixel' to standard normal values per channel / per pixel.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace colo::data {

enum class ErasingMode { kConst, kRand, kPixel };

const char* to_string(ErasingMode mode);
// "const" | "rand" | "pixel" (timm's re_mode); throws std::invalid_argument otherwise.
ErasingMode erasing_mode_from_string(const std::string& text);

struct RandomErasingOptions {
  /* implicit */ RandomErasingOptions(double p = 0.0, ErasingMode m = ErasingMode::kConst) : probability(p), mode(m) {}

  double probability = 0.0;  // 0: off (timm's --reprob; 0.25 in DeiT's recipe)
  ErasingMode mode = ErasingMode::kConst;
  double min_area = 0.02;
  double max_area = 1.0 / 3.0;
  double min_aspect = 0.3;  // the maximum is 1 / min_aspect

  bool enabled() const { return probability > 0; }
};

struct ErasingBox {
  int64_t top = 0;
  int64_t left = 0;
  int64_t height = 0;
  int64_t width = 0;
};

// The rectangle timm's _erase would choose for an image of this size, drawn from the seed's
// stream; nullopt when the image is left alone (probability, or ten attempts that did not fit).
std::optional<ErasingBox> draw_erasing_box(const RandomErasingOptions& options, int64_t height, int64_t width,
                                           uint64_t seed);

// Erases box in image (float [C, H, W], contiguous, in place) with the mode's values, the
// normal ones drawn from the seed's stream.
void erase_box(torch::Tensor& image, const ErasingBox& box, ErasingMode mode, uint64_t seed);

// Both: one image's random erasing.
void random_erase(torch::Tensor& image, const RandomErasingOptions& options, uint64_t seed);

}  // namespace colo::data
