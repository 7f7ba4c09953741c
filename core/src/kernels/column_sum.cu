#include "column_sum.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "float_convert.cuh"

#include <algorithm>

namespace colo::kernels {
namespace {

constexpr int kLoadBytes = 16;
constexpr int kWarps = 8;    // warps per block, each on its own rows (or chunks)
constexpr int kInFlight = 4;  // rows each thread loads before it adds any
constexpr int kMaxVector = kLoadBytes / 2;

using detail::from_float;
using detail::to_float;

template <typename T>
__device__ __forceinline__ void add_vector(const uint4& bits, float* sums) {
  constexpr int kVector = kLoadBytes / sizeof(T);
  const T* v = reinterpret_cast<const T*>(&bits);
#pragma unroll
  for (int i = 0; i < kVector; ++i) sums[i] += to_float(v[i]);
}

// Block (32, kWarps): lane l covers columns [(blockIdx.x * 32 + l) * kVector, + kVector) of the
// rows [blockIdx.y * rows_per_chunk, + rows_per_chunk), warp w taking every kWarps-th row; the
// block's sum over its rows goes to scratch row blockIdx.y.
template <typename T>
__global__ void __launch_bounds__(32 * kWarps)
    chunk_sums(const T* __restrict__ x, int64_t rows, int64_t cols, int64_t rows_per_chunk, float* __restrict__ scratch) {
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
      uint4 bits[kInFlight];
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) bits[u] = *reinterpret_cast<const uint4*>(x + (r + u * kWarps) * cols + col);
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) add_vector<T>(bits[u], sums);
    }
    for (; r < end; r += kWarps) add_vector<T>(*reinterpret_cast<const uint4*>(x + r * cols + col), sums);
  }

  // The warps' sums meet in shared memory ([warp][element][lane]: no bank conflicts), then one
  // thread per (element, lane) adds them in warp order.
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

// Block (32, kAddWarps): lane l takes column blockIdx.x * 32 + l, warp w every kAddWarps-th chunk
// (many warps: a narrow layer has few column blocks, and each thread's loads are a chain); the
// warps' sums are added in warp order and rounded once into out.
constexpr int kAddWarps = 32;

template <typename T>
__global__ void __launch_bounds__(32 * kAddWarps)
    add_chunks(const float* __restrict__ scratch, int64_t chunks, int64_t cols, T* __restrict__ out) {
  const int lane = threadIdx.x;
  const int warp = threadIdx.y;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + lane;
  float sum = 0.f;
  if (c < cols) {
#pragma unroll 4
    for (int64_t j = warp; j < chunks; j += kAddWarps) sum += scratch[j * cols + c];
  }
  __shared__ float warp_sums[kAddWarps][33];
  warp_sums[warp][lane] = sum;
  __syncthreads();
  if (warp == 0 && c < cols) {
    float total = 0.f;
#pragma unroll
    for (int w = 0; w < kAddWarps; ++w) total += warp_sums[w][lane];
    out[c] = from_float<T>(total);
  }
}

template <typename T>
cudaError_t launch_add_chunks(const float* scratch, int64_t chunks, int64_t cols, void* out, cudaStream_t stream);

int64_t column_tiles(ElementType dtype, int64_t cols) {
  const int64_t per_block = 32 * static_cast<int64_t>(column_sum_vector_width(dtype));
  return (cols + per_block - 1) / per_block;
}

template <typename T>
cudaError_t launch(ElementType dtype, const void* x, int64_t rows, int64_t cols, int64_t chunks, float* scratch,
                   void* out, cudaStream_t stream) {
  const int64_t rows_per_chunk = (rows + chunks - 1) / chunks;
  const auto tiles = static_cast<unsigned>(column_tiles(dtype, cols));
  chunk_sums<T><<<dim3(tiles, static_cast<unsigned>(chunks)), dim3(32, kWarps), 0, stream>>>(
      static_cast<const T*>(x), rows, cols, rows_per_chunk, scratch);
  if (const auto status = cudaGetLastError(); status != cudaSuccess) return status;
  return launch_add_chunks<T>(scratch, chunks, cols, out, stream);
}

template <typename T>
cudaError_t launch_add_chunks(const float* scratch, int64_t chunks, int64_t cols, void* out, cudaStream_t stream) {
  add_chunks<T><<<static_cast<unsigned>((cols + 31) / 32), dim3(32, kAddWarps), 0, stream>>>(scratch, chunks, cols,
                                                                                             static_cast<T*>(out));
  return cudaGetLastError();
}

}  // namespace

cudaError_t column_sum_add_chunks(ElementType dtype, const float* scratch, int64_t chunks, int64_t cols, void* out,
                                  cudaStream_t stream) {
  if (chunks <= 0 || cols <= 0) return cudaSuccess;
  switch (dtype) {
    case ElementType::kFloat: return launch_add_chunks<float>(scratch, chunks, cols, out, stream);
    case ElementType::kHalf: return launch_add_chunks<__half>(scratch, chunks, cols, out, stream);
    case ElementType::kBFloat16: return launch_add_chunks<__nv_bfloat16>(scratch, chunks, cols, out, stream);
  }
  return cudaErrorInvalidValue;
}

int column_sum_vector_width(ElementType dtype) { return dtype == ElementType::kFloat ? kLoadBytes / 4 : kLoadBytes / 2; }

int64_t column_sum_chunks(ElementType dtype, int64_t rows, int64_t cols, int device) {
  int multiprocessors = 0;
  if (cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      multiprocessors <= 0) {
    multiprocessors = 132;
  }
  // Four blocks of 256 threads per multiprocessor over all column tiles, each chunk at least
  // kInFlight rows per warp (whole loads in flight); at most 65535 chunks (the grid's y limit).
  const int64_t wanted = 4 * static_cast<int64_t>(multiprocessors) / std::max<int64_t>(1, column_tiles(dtype, cols));
  const int64_t per_chunk = static_cast<int64_t>(kWarps) * kInFlight;
  const int64_t most = std::min<int64_t>(65535, std::max<int64_t>(1, (rows + per_chunk - 1) / per_chunk));
  return std::clamp<int64_t>(wanted, 1, most);
}

cudaError_t column_sum(ElementType dtype, const void* x, int64_t rows, int64_t cols, int64_t chunks, float* scratch,
                       void* out, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0 || chunks <= 0) return cudaSuccess;
  switch (dtype) {
    case ElementType::kFloat: return launch<float>(dtype, x, rows, cols, chunks, scratch, out, stream);
    case ElementType::kHalf: return launch<__half>(dtype, x, rows, cols, chunks, scratch, out, stream);
    case ElementType::kBFloat16: return launch<__nv_bfloat16>(dtype, x, rows, cols, chunks, scratch, out, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace colo::kernels
