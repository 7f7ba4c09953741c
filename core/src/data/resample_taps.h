// The resampling filter's taps along one axis, shared by resample_rgb (image_resample.cpp) and the
// GPU decoder's resize kernel (image_folder_gpu.cpp uploads them), so that both weigh the same
// source pixels with the same float weights.
#pragma once

#include <colo/data/image_resample.h>

#include <cstdint>
#include <vector>

namespace colo::data::detail {

// For each output pixel along one axis: the first source pixel the filter reads, how many, and
// their weights (max_taps slots each).
struct Taps {
  std::vector<int64_t> first;
  std::vector<int64_t> count;
  std::vector<float> weights;
  int64_t max_taps = 0;
};

// The taps of out_size pixels resampled from [start, start + size) of an axis whose pixels
// [lo, hi) may be read.
Taps compute_taps(double start, double size, int64_t lo, int64_t hi, int64_t out_size);

// resample_rgb's taps for both axes: `box` of a height x width image, read within `bounds`.
struct ResampleTaps {
  Taps rows;
  Taps columns;
};
ResampleTaps resample_taps(int64_t height, int64_t width, const CropBox& box, const PixelBounds& bounds,
                           int64_t out_height, int64_t out_width);

}  // namespace colo::data::detail
