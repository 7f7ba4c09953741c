#include "image_resample.h"

namespace colo::kernels {
namespace {

// 32 x 8 threads, one output pixel each, a warp along a row: neighbouring threads read
// neighbouring source pixels (the cache lines an image row's taps share).
constexpr int kBlockX = 32;
constexpr int kBlockY = 8;

// resample_rgb's sums, in its order: per source row the horizontal sum of the taps, then the
// vertical sum of those. __fmul_rn/__fadd_rn keep nvcc from fusing them into FMAs, which the CPU
// build (ISO C++, no -ffp-contract) does not do either.
__global__ void __launch_bounds__(kBlockX* kBlockY)
    resample_kernel(const ResampleJob* jobs, int out_height, int out_width) {
  const ResampleJob job = jobs[blockIdx.z];
  const int x = static_cast<int>(blockIdx.x) * kBlockX + static_cast<int>(threadIdx.x);
  const int y = static_cast<int>(blockIdx.y) * kBlockY + static_cast<int>(threadIdx.y);
  if (x >= out_width || y >= out_height) return;
  const int row_first = job.row_first[y];
  const int row_count = job.row_count[y];
  const float* row_weights = job.row_weights + static_cast<int64_t>(y) * job.row_max_taps;
  const int column_first = job.column_first[x];
  const int column_count = job.column_count[x];
  const float* column_weights = job.column_weights + static_cast<int64_t>(x) * job.column_max_taps;
  float r = 0.0f, g = 0.0f, b = 0.0f;
  for (int ky = 0; ky < row_count; ++ky) {
    const unsigned char* p = job.pixels + static_cast<int64_t>(row_first + ky) * job.pitch + column_first * 3;
    float hr = 0.0f, hg = 0.0f, hb = 0.0f;
    for (int kx = 0; kx < column_count; ++kx, p += 3) {
      const float w = column_weights[kx];
      hr = __fadd_rn(hr, __fmul_rn(w, static_cast<float>(p[0])));
      hg = __fadd_rn(hg, __fmul_rn(w, static_cast<float>(p[1])));
      hb = __fadd_rn(hb, __fmul_rn(w, static_cast<float>(p[2])));
    }
    const float w = row_weights[ky];
    r = __fadd_rn(r, __fmul_rn(w, hr));
    g = __fadd_rn(g, __fmul_rn(w, hg));
    b = __fadd_rn(b, __fmul_rn(w, hb));
  }
  constexpr float kScale = 1.0f / 255.0f;
  const int64_t plane = static_cast<int64_t>(out_height) * out_width;
  const int64_t at = static_cast<int64_t>(y) * out_width + (job.flip ? out_width - 1 - x : x);
  job.out[at] = fminf(fmaxf(__fmul_rn(r, kScale), 0.0f), 1.0f);
  job.out[plane + at] = fminf(fmaxf(__fmul_rn(g, kScale), 0.0f), 1.0f);
  job.out[2 * plane + at] = fminf(fmaxf(__fmul_rn(b, kScale), 0.0f), 1.0f);
}

}  // namespace

cudaError_t resample_rgb_batch(const ResampleJob* jobs, int count, int out_height, int out_width, cudaStream_t stream) {
  if (count <= 0 || out_height <= 0 || out_width <= 0) return cudaSuccess;
  const dim3 block(kBlockX, kBlockY);
  const dim3 grid((out_width + kBlockX - 1) / kBlockX, (out_height + kBlockY - 1) / kBlockY, count);
  resample_kernel<<<grid, block, 0, stream>>>(jobs, out_height, out_width);
  return cudaGetLastError();
}

}  // namespace colo::kernels
