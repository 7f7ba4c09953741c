// resample_rgb on the GPU for a batch of images in device memory (builds with nvJPEG, which are
// the ones that need it): the filter taps computed on the host as resample_rgb computes them,
// staged in one pinned buffer, copied over, and one launch of colo's resize kernel
// (core/src/kernels/image_resample.h) on the given stream.
#pragma once

#ifdef COLO_WITH_NVJPEG
#include <colo/data/image_resample.h>
#include <cuda_runtime_api.h>
#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace colo::data::detail {

struct GpuResampleImage {
  const uint8_t* pixels = nullptr;  // device memory, RGB interleaved, rows of width * 3 bytes
  int64_t height = 0;
  int64_t width = 0;
  CropBox box;
  PixelBounds bounds;
  bool flip = false;
  float* out = nullptr;  // device memory, [3, out_height, out_width]
};

// Launches the resampling on `stream` (the current stream of `device`). Returns the buffers the
// launch reads, which must stay alive until the stream is done with them. Throws
// std::runtime_error when the copy or the launch fails.
std::vector<torch::Tensor> launch_resample(const std::vector<GpuResampleImage>& images, int64_t out_height,
                                           int64_t out_width, const torch::Device& device, cudaStream_t stream);

// Waits, yielding the core, until `stream` has done everything queued so far.
void wait_for(cudaStream_t stream, const char* what);

}  // namespace colo::data::detail
#endif
