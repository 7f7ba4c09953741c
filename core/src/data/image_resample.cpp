#include <colo/data/image_resample.h>

#include "resample_taps.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace colo::data {
namespace detail {

// PIL's precompute_coeffs, which PyTorch's antialiased interpolation copies: centre = start +
// (i + 0.5) * scale, support = max(scale, 1), a triangle of that half-width, taps limited to
// [lo, hi) and renormalised.
Taps compute_taps(double start, double size, int64_t lo, int64_t hi, int64_t out_size) {
  const double scale = size / static_cast<double>(out_size);
  const double filter_scale = std::max(scale, 1.0);
  const double support = filter_scale;  // the triangle's support is 1
  Taps taps;
  taps.max_taps = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  taps.first.resize(static_cast<size_t>(out_size));
  taps.count.resize(static_cast<size_t>(out_size));
  taps.weights.assign(static_cast<size_t>(out_size * taps.max_taps), 0.0F);
  std::vector<double> w(static_cast<size_t>(taps.max_taps));
  for (int64_t i = 0; i < out_size; ++i) {
    const double center = start + (static_cast<double>(i) + 0.5) * scale;
    int64_t first = std::max(lo, static_cast<int64_t>(std::floor(center - support + 0.5)));
    int64_t last = std::min(hi, static_cast<int64_t>(std::floor(center + support + 0.5)));
    if (last <= first) {  // a box at the very edge: the nearest pixel
      first = std::clamp(static_cast<int64_t>(std::floor(center)), lo, hi - 1);
      last = first + 1;
    }
    const int64_t count = std::min(last - first, taps.max_taps);
    double total = 0;
    for (int64_t k = 0; k < count; ++k) {
      const double x = (static_cast<double>(first + k) - center + 0.5) / filter_scale;
      w[static_cast<size_t>(k)] = std::max(0.0, 1.0 - std::abs(x));
      total += w[static_cast<size_t>(k)];
    }
    float* target = taps.weights.data() + i * taps.max_taps;
    for (int64_t k = 0; k < count; ++k) {
      target[k] = static_cast<float>(total > 0 ? w[static_cast<size_t>(k)] / total : 1.0 / static_cast<double>(count));
    }
    taps.first[static_cast<size_t>(i)] = first;
    taps.count[static_cast<size_t>(i)] = count;
  }
  return taps;
}

}  // namespace detail

namespace {

// A tiny deterministic generator: SplitMix64 over a counter.
class Draws {
 public:
  explicit Draws(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double uniform(double lo, double hi) { return lo + (hi - lo) * static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // An integer in [0, n).
  int64_t below(int64_t n) { return static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }

 private:
  uint64_t state_;
};

}  // namespace

namespace detail {

ResampleTaps resample_taps(int64_t height, int64_t width, const CropBox& box, const PixelBounds& bounds,
                           int64_t out_height, int64_t out_width) {
  const PixelBounds b{std::clamp<int64_t>(bounds.top, 0, height - 1), std::clamp<int64_t>(bounds.left, 0, width - 1),
                      std::clamp<int64_t>(bounds.bottom, 1, height), std::clamp<int64_t>(bounds.right, 1, width)};
  ResampleTaps taps;
  taps.columns = compute_taps(box.left, box.width, b.left, std::max(b.right, b.left + 1), out_width);
  taps.rows = compute_taps(box.top, box.height, b.top, std::max(b.bottom, b.top + 1), out_height);
  return taps;
}

}  // namespace detail

void resample_rgb(const uint8_t* pixels, int64_t height, int64_t width, const CropBox& box, const PixelBounds& bounds,
                  int64_t out_height, int64_t out_width, bool flip, float* out) {
  const detail::ResampleTaps taps = detail::resample_taps(height, width, box, bounds, out_height, out_width);
  const detail::Taps& columns = taps.columns;
  const detail::Taps& rows = taps.rows;
  const int64_t row_begin = rows.first.front();
  int64_t row_end = row_begin;
  for (int64_t i = 0; i < out_height; ++i) {
    row_end = std::max(row_end, rows.first[static_cast<size_t>(i)] + rows.count[static_cast<size_t>(i)]);
  }

  // Horizontal pass over the rows the vertical one reads, into interleaved floats.
  std::vector<float> horizontal(static_cast<size_t>((row_end - row_begin) * out_width * 3));
  for (int64_t y = row_begin; y < row_end; ++y) {
    const uint8_t* source = pixels + y * width * 3;
    float* target = horizontal.data() + (y - row_begin) * out_width * 3;
    for (int64_t x = 0; x < out_width; ++x) {
      const uint8_t* p = source + columns.first[static_cast<size_t>(x)] * 3;
      const float* w = columns.weights.data() + x * columns.max_taps;
      float r = 0, g = 0, bl = 0;
      for (int64_t k = 0; k < columns.count[static_cast<size_t>(x)]; ++k, p += 3) {
        r += w[k] * static_cast<float>(p[0]);
        g += w[k] * static_cast<float>(p[1]);
        bl += w[k] * static_cast<float>(p[2]);
      }
      target[3 * x] = r;
      target[3 * x + 1] = g;
      target[3 * x + 2] = bl;
    }
  }

  // Vertical pass into planar output, scaled to [0, 1].
  const int64_t plane = out_height * out_width;
  std::vector<float> line(static_cast<size_t>(out_width * 3));
  for (int64_t i = 0; i < out_height; ++i) {
    std::fill(line.begin(), line.end(), 0.0F);
    const float* w = rows.weights.data() + i * rows.max_taps;
    const int64_t first = rows.first[static_cast<size_t>(i)] - row_begin;
    for (int64_t k = 0; k < rows.count[static_cast<size_t>(i)]; ++k) {
      const float* source = horizontal.data() + (first + k) * out_width * 3;
      const float weight = w[k];
      for (int64_t j = 0; j < out_width * 3; ++j) line[static_cast<size_t>(j)] += weight * source[j];
    }
    for (int64_t c = 0; c < 3; ++c) {
      float* target = out + c * plane + i * out_width;
      for (int64_t x = 0; x < out_width; ++x) {
        const float v = line[static_cast<size_t>(3 * x + c)] * (1.0F / 255.0F);
        target[flip ? out_width - 1 - x : x] = std::clamp(v, 0.0F, 1.0F);
      }
    }
  }
}

CropBox random_resized_crop_box(int64_t height, int64_t width, const RandomResizedCropParams& params, uint64_t seed) {
  Draws draws(seed);
  const double area = static_cast<double>(height * width);
  const double log_min = std::log(params.min_ratio);
  const double log_max = std::log(params.max_ratio);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * draws.uniform(params.min_scale, params.max_scale);
    const double aspect = std::exp(draws.uniform(log_min, log_max));
    const auto w = static_cast<int64_t>(std::nearbyint(std::sqrt(target_area * aspect)));
    const auto h = static_cast<int64_t>(std::nearbyint(std::sqrt(target_area / aspect)));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      const int64_t top = draws.below(height - h + 1);
      const int64_t left = draws.below(width - w + 1);
      return {static_cast<double>(top), static_cast<double>(left), static_cast<double>(h), static_cast<double>(w)};
    }
  }
  // Fallback: the centred box of the nearest allowed aspect ratio.
  const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  int64_t w = width;
  int64_t h = height;
  if (in_ratio < params.min_ratio) {
    h = static_cast<int64_t>(std::nearbyint(static_cast<double>(w) / params.min_ratio));
  } else if (in_ratio > params.max_ratio) {
    w = static_cast<int64_t>(std::nearbyint(static_cast<double>(h) * params.max_ratio));
  }
  return {static_cast<double>((height - h) / 2), static_cast<double>((width - w) / 2), static_cast<double>(h),
          static_cast<double>(w)};
}

CropBox resize_center_crop_box(int64_t height, int64_t width, int64_t resize_size, int64_t crop_size) {
  // Python's int() truncates; round() rounds half to even, as nearbyint does by default.
  const bool portrait = height > width;
  const int64_t shorter = portrait ? width : height;
  const int64_t longer = portrait ? height : width;
  const auto resized_longer = static_cast<int64_t>(static_cast<double>(resize_size) * static_cast<double>(longer) /
                                                   static_cast<double>(shorter));
  const int64_t resized_height = portrait ? resized_longer : resize_size;
  const int64_t resized_width = portrait ? resize_size : resized_longer;
  const double scale_y = static_cast<double>(height) / static_cast<double>(resized_height);
  const double scale_x = static_cast<double>(width) / static_cast<double>(resized_width);
  const double top = std::nearbyint(static_cast<double>(resized_height - crop_size) / 2.0);
  const double left = std::nearbyint(static_cast<double>(resized_width - crop_size) / 2.0);
  return {top * scale_y, left * scale_x, static_cast<double>(crop_size) * scale_y,
          static_cast<double>(crop_size) * scale_x};
}

}  // namespace colo::data
