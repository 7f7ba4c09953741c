#pragma once

#include <colo/data/image_resample.h>
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace colo::data {

// ImageFolder's GPU decoder in parts (decoder nvjpeg; image_folder.h), for tests and tools that
// compare it with the CPU decoder. Builds without nvJPEG (nvjpeg_compiled() false) throw
// std::runtime_error from both.

// One JPEG decoded by nvJPEG: 8-bit RGB [height, width, 3] on the device, or undefined pixels and
// the reason nvJPEG gave (ImageFolder then decodes that file on the CPU).
struct GpuDecodedJpeg {
  torch::Tensor pixels;
  bool hardware = false;  // by the GPU's JPEG engines rather than nvJPEG's CUDA decoder
  std::string error;
};
std::vector<GpuDecodedJpeg> nvjpeg_decode(const std::vector<std::vector<uint8_t>>& files, const torch::Device& device);

// resample_rgb on the GPU: pixels uint8 [height, width, 3] on a CUDA device, the result float
// [3, out_height, out_width] there; the same floats as resample_rgb makes of the same pixels.
torch::Tensor resample_rgb_on_device(const torch::Tensor& pixels, const CropBox& box, const PixelBounds& bounds,
                                     int64_t out_height, int64_t out_width, bool flip);

}  // namespace colo::data
