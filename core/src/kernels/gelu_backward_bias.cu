#include "gelu_backward_bias.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "float_convert.cuh"
#include "gelu_math.cuh"

namespace colo::kernels {
namespace {

constexpr int kLoadBytes = 16;
constexpr int kWarps = 8;     // warps per block, each on its own rows of the chunk
constexpr int kInFlight = 2;  // rows (of dy and h each) each thread loads before it computes any
constexpr int kMaxVector = kLoadBytes / 2;

using detail::from_float;
using detail::to_float;

// ATen's GeluBackwardCUDAKernelImpl (kNone), term for term.
using detail::exact_gelu_grad;

// dx for one 16-byte vector of dy and h; its rounded values added to sums.
template <typename T>
__device__ __forceinline__ uint4 backward_vector(const uint4& dy_bits, const uint4& h_bits, float* sums) {
  constexpr int kVector = kLoadBytes / sizeof(T);
  uint4 out;
  const T* dy = reinterpret_cast<const T*>(&dy_bits);
  const T* h = reinterpret_cast<const T*>(&h_bits);
  T* dx = reinterpret_cast<T*>(&out);
#pragma unroll
  for (int i = 0; i < kVector; ++i) {
    dx[i] = from_float<T>(exact_gelu_grad(to_float(dy[i]), to_float(h[i])));
    sums[i] += to_float(dx[i]);
  }
  return out;
}

// Block (32, kWarps): lane l covers columns [(blockIdx.x * 32 + l) * kVector, + kVector) of the
// rows [blockIdx.y * rows_per_chunk, + rows_per_chunk), warp w taking every kWarps-th row.
template <typename T>
__global__ void __launch_bounds__(32 * kWarps)
    backward_partials(const T* dy, const T* __restrict__ h, int64_t rows, int64_t cols, int64_t rows_per_chunk, T* dx,
                      float* __restrict__ scratch) {
  constexpr int kVector = kLoadBytes / sizeof(T);
  const int lane = threadIdx.x;
  const int warp = threadIdx.y;
  const int64_t col = (static_cast<int64_t>(blockIdx.x) * 32 + lane) * kVector;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  const int64_t end = begin + rows_per_chunk < rows ? begin + rows_per_chunk : rows;

  float sums[kVector];
#pragma unroll
  for (int i = 0; i < kVector; ++i) sums[i] = 0.f;
  if (col < cols) {
    int64_t r = begin + warp;
    for (; r + (kInFlight - 1) * kWarps < end; r += kInFlight * kWarps) {
      uint4 dy_bits[kInFlight], h_bits[kInFlight];
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) {
        const int64_t at = (r + u * kWarps) * cols + col;
        dy_bits[u] = *reinterpret_cast<const uint4*>(dy + at);
        h_bits[u] = *reinterpret_cast<const uint4*>(h + at);
      }
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) {
        *reinterpret_cast<uint4*>(dx + (r + u * kWarps) * cols + col) = backward_vector<T>(dy_bits[u], h_bits[u], sums);
      }
    }
    for (; r < end; r += kWarps) {
      const int64_t at = r * cols + col;
      const uint4 dy_bits = *reinterpret_cast<const uint4*>(dy + at);
      const uint4 h_bits = *reinterpret_cast<const uint4*>(h + at);
      *reinterpret_cast<uint4*>(dx + at) = backward_vector<T>(dy_bits, h_bits, sums);
    }
  }

  // As column_sum's chunk sums: the warps meet in shared memory and are added in warp order.
  __shared__ float warp_sums[kWarps][kMaxVector][32];
#pragma unroll
  for (int i = 0; i < kVector; ++i) warp_sums[warp][i][lane] = sums[i];
  __syncthreads();
  const int t = warp * 32 + lane;
  if (t < kVector * 32) {
    const int i = t / 32;
    const int l = t % 32;
    const int64_t c = (static_cast<int64_t>(blockIdx.x) * 32 + l) * kVector + i;
    if (c < cols) {
      float total = 0.f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) total += warp_sums[w][i][l];
      scratch[static_cast<int64_t>(blockIdx.y) * cols + c] = total;
    }
  }
}

template <typename T>
cudaError_t launch(const void* dy, const void* h, int64_t rows, int64_t cols, int64_t chunks, void* dx, float* scratch,
                   cudaStream_t stream) {
  constexpr int64_t kPerBlock = 32 * (kLoadBytes / sizeof(T));
  const int64_t tiles = (cols + kPerBlock - 1) / kPerBlock;
  const int64_t rows_per_chunk = (rows + chunks - 1) / chunks;
  backward_partials<T><<<dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(chunks)), dim3(32, kWarps), 0,
                         stream>>>(static_cast<const T*>(dy), static_cast<const T*>(h), rows, cols, rows_per_chunk,
                                   static_cast<T*>(dx), scratch);
  return cudaGetLastError();
}

}  // namespace

int64_t gelu_backward_column_chunks(ElementType dtype, int64_t rows, int64_t cols, int device) {
  int multiprocessors = 0;
  if (cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      multiprocessors <= 0) {
    multiprocessors = 132;
  }
  const int64_t per_block = 32 * static_cast<int64_t>(dtype == ElementType::kFloat ? kLoadBytes / 4 : kLoadBytes / 2);
  const int64_t tiles = (cols + per_block - 1) / per_block;
  // Eight blocks of 256 threads per multiprocessor (all it holds) over all column tiles, each chunk
  // at least kInFlight rows per warp; at most 65535 chunks (the grid's y limit).
  const int64_t wanted = 8 * static_cast<int64_t>(multiprocessors) / (tiles > 0 ? tiles : 1);
  const int64_t per_chunk = static_cast<int64_t>(kWarps) * kInFlight;
  int64_t most = (rows + per_chunk - 1) / per_chunk;
  most = most < 1 ? 1 : (most > 65535 ? 65535 : most);
  return wanted < 1 ? 1 : (wanted > most ? most : wanted);
}

cudaError_t gelu_backward_column_partials(ElementType dtype, const void* dy, const void* h, int64_t rows, int64_t cols,
                                          int64_t chunks, void* dx, float* scratch, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0 || chunks <= 0) return cudaSuccess;
  switch (dtype) {
    case ElementType::kFloat: return launch<float>(dy, h, rows, cols, chunks, dx, scratch, stream);
    case ElementType::kHalf: return launch<__half>(dy, h, rows, cols, chunks, dx, scratch, stream);
    case ElementType::kBFloat16: return launch<__nv_bfloat16>(dy, h, rows, cols, chunks, dx, scratch, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace colo::kernels
