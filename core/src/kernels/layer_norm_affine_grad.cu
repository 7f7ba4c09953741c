#include "layer_norm_affine_grad.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "float_convert.cuh"

#include <algorithm>

namespace colo::kernels {
namespace {

constexpr int kLoadBytes = 16;
constexpr int kWarps = 8;  // warps per block, each on its own rows of the chunk
constexpr int kMaxVector = kLoadBytes / 2;

using detail::to_float;

// Block (32, kWarps): lane l covers columns [(blockIdx.x * 32 + l) * kVector, + kVector) of the
// rows [blockIdx.y * rows_per_chunk, + rows_per_chunk), warp w taking every kWarps-th row.
template <typename T>
__global__ void __launch_bounds__(32 * kWarps)
    affine_grad_partials(const T* __restrict__ grad, const T* __restrict__ input, const float* __restrict__ mean,
                         const float* __restrict__ rstd, int64_t rows, int64_t cols, int64_t rows_per_chunk,
                         float* __restrict__ gamma_partial, float* __restrict__ beta_partial) {
  constexpr int kVector = kLoadBytes / sizeof(T);
  const int lane = threadIdx.x;
  const int warp = threadIdx.y;
  const int64_t col = (static_cast<int64_t>(blockIdx.x) * 32 + lane) * kVector;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  const int64_t end = begin + rows_per_chunk < rows ? begin + rows_per_chunk : rows;

  float dgamma[kVector];
  float dbeta[kVector];
#pragma unroll
  for (int i = 0; i < kVector; ++i) dgamma[i] = dbeta[i] = 0.f;
  if (col < cols) {
#pragma unroll 2
    for (int64_t r = begin + warp; r < end; r += kWarps) {
      const float mu = mean[r];
      const float rs = rstd[r];
      const uint4 g_bits = *reinterpret_cast<const uint4*>(grad + r * cols + col);
      const uint4 x_bits = *reinterpret_cast<const uint4*>(input + r * cols + col);
      const T* g = reinterpret_cast<const T*>(&g_bits);
      const T* x = reinterpret_cast<const T*>(&x_bits);
#pragma unroll
      for (int i = 0; i < kVector; ++i) {
        const float gi = to_float(g[i]);
        dgamma[i] += gi * ((to_float(x[i]) - mu) * rs);
        dbeta[i] += gi;
      }
    }
  }

  // The warps' sums meet in shared memory ([warp][element][lane]: no bank conflicts on the way in),
  // then one thread per (element, lane) adds them up and writes the chunk's partial sum.
  __shared__ float gamma_sums[kWarps][kMaxVector][32];
  __shared__ float beta_sums[kWarps][kMaxVector][32];
#pragma unroll
  for (int i = 0; i < kVector; ++i) {
    gamma_sums[warp][i][lane] = dgamma[i];
    beta_sums[warp][i][lane] = dbeta[i];
  }
  __syncthreads();
  const int t = warp * 32 + lane;
  if (t < kVector * 32) {
    const int i = t / 32;
    const int l = t % 32;
    const int64_t c = (static_cast<int64_t>(blockIdx.x) * 32 + l) * kVector + i;
    if (c < cols) {
      float g_sum = 0.f;
      float b_sum = 0.f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        g_sum += gamma_sums[w][i][l];
        b_sum += beta_sums[w][i][l];
      }
      gamma_partial[static_cast<int64_t>(blockIdx.y) * cols + c] = g_sum;
      beta_partial[static_cast<int64_t>(blockIdx.y) * cols + c] = b_sum;
    }
  }
}

int64_t column_tiles(ElementType dtype, int64_t cols) {
  const int64_t per_block = 32 * static_cast<int64_t>(layer_norm_affine_grad_vector_width(dtype));
  return (cols + per_block - 1) / per_block;
}

template <typename T>
cudaError_t launch(const void* grad, const void* input, const float* mean, const float* rstd, int64_t rows,
                   int64_t cols, int64_t chunks, int64_t tiles, float* gamma_partial, float* beta_partial,
                   cudaStream_t stream) {
  const int64_t rows_per_chunk = (rows + chunks - 1) / chunks;
  affine_grad_partials<T><<<dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(chunks)), dim3(32, kWarps), 0,
                            stream>>>(static_cast<const T*>(grad), static_cast<const T*>(input), mean, rstd, rows,
                                      cols, rows_per_chunk, gamma_partial, beta_partial);
  return cudaGetLastError();
}

}  // namespace

int layer_norm_affine_grad_vector_width(ElementType dtype) {
  return dtype == ElementType::kFloat ? kLoadBytes / 4 : kLoadBytes / 2;
}

int64_t layer_norm_affine_grad_chunks(ElementType dtype, int64_t rows, int64_t cols, int device) {
  int multiprocessors = 0;
  if (cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      multiprocessors <= 0) {
    multiprocessors = 132;
  }
  // Four blocks of 256 threads per multiprocessor over all column tiles, each chunk at least one
  // row per warp; at most 65535 chunks (the grid's y limit).
  const int64_t wanted = 4 * static_cast<int64_t>(multiprocessors) / std::max<int64_t>(1, column_tiles(dtype, cols));
  const int64_t most = std::min<int64_t>(65535, std::max<int64_t>(1, (rows + kWarps - 1) / kWarps));
  return std::clamp<int64_t>(wanted, 1, most);
}

cudaError_t layer_norm_affine_grad_partials(ElementType dtype, const void* grad, const void* input,
                                            const float* mean, const float* rstd, int64_t rows, int64_t cols,
                                            int64_t chunks, float* gamma_partial, float* beta_partial,
                                            cudaStream_t stream) {
  if (rows <= 0 || cols <= 0 || chunks <= 0) return cudaSuccess;
  const int64_t tiles = column_tiles(dtype, cols);
  switch (dtype) {
    case ElementType::kFloat:
      return launch<float>(grad, input, mean, rstd, rows, cols, chunks, tiles, gamma_partial, beta_partial, stream);
    case ElementType::kHalf:
      return launch<__half>(grad, input, mean, rstd, rows, cols, chunks, tiles, gamma_partial, beta_partial, stream);
    case ElementType::kBFloat16:
      return launch<__nv_bfloat16>(grad, input, mean, rstd, rows, cols, chunks, tiles, gamma_partial, beta_partial,
                                   stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace colo::kernels
