#pragma once

// ImageFolder's resize on the GPU (decoder nvjpeg, issue 38): for each image of a batch, the
// antialiased bilinear resampling of colo::data::resample_rgb (PIL's and torchvision's filter)
// from 8-bit interleaved RGB on the device into float [3, H, W] planes in [0, 1], mirrored when
// asked. The filter's taps come from the host (core/src/data/resample_taps.h computes them as
// resample_rgb does) and the arithmetic is resample_rgb's, operation for operation without fused
// multiply-adds, so that the same pixels give the same floats, bit for bit. Kept free of LibTorch
// headers: nvcc compiles it alone.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace colo::kernels {

// One image's job; every pointer is device memory.
struct ResampleJob {
  const unsigned char* pixels;  // RGB, interleaved
  int64_t pitch;                // bytes from one row to the next
  // Per output row (y) and column (x): the first source row/column, how many, and max_taps weights.
  const int32_t* row_first;
  const int32_t* row_count;
  const float* row_weights;
  const int32_t* column_first;
  const int32_t* column_count;
  const float* column_weights;
  int32_t row_max_taps;
  int32_t column_max_taps;
  int32_t flip;  // mirror left-right
  float* out;    // [3, out_height, out_width]
};

// Runs `count` jobs (an array in device memory) on `stream`.
cudaError_t resample_rgb_batch(const ResampleJob* jobs, int count, int out_height, int out_width, cudaStream_t stream);

}  // namespace colo::kernels
