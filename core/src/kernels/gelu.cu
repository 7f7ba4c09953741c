#include "gelu.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "float_convert.cuh"
#include "gelu_math.cuh"

namespace colo::kernels {
namespace {

constexpr int kLoadBytes = 16;
constexpr int kThreads = 256;

using detail::from_float;
using detail::to_float;

__device__ __forceinline__ float gelu(float h) { return detail::exact_gelu(h); }

// Each thread takes kUnroll vectors kThreads apart, all loaded before any is computed or stored:
// the loads in flight are what reach the memory bandwidth (out may alias the input, so the
// compiler would not move a later load above an earlier store by itself).
constexpr int kUnroll = 4;

template <typename T>
__global__ void __launch_bounds__(kThreads) forward_kernel(const T* h, int64_t n, T* out) {
  constexpr int kSize = kLoadBytes / sizeof(T);
  const int64_t vectors = n / kSize;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kThreads * kUnroll + threadIdx.x;
  uint4 bits[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t v = first + u * kThreads;
    if (v < vectors) bits[u] = reinterpret_cast<const uint4*>(h)[v];
  }
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t v = first + u * kThreads;
    if (v < vectors) {
      T* e = reinterpret_cast<T*>(&bits[u]);
#pragma unroll
      for (int i = 0; i < kSize; ++i) e[i] = from_float<T>(gelu(to_float(e[i])));
      reinterpret_cast<uint4*>(out)[v] = bits[u];
    }
  }
  // The tail past the last whole vector, one element per thread of the first block.
  if (blockIdx.x == 0 && threadIdx.x < n - vectors * kSize) {
    const int64_t i = vectors * kSize + threadIdx.x;
    out[i] = from_float<T>(gelu(to_float(h[i])));
  }
}

// One block per kThreads x kUnroll vectors (at least one block: the tail needs it).
unsigned grid_for(int64_t n, int element_bytes) {
  const int64_t vectors = n / (kLoadBytes / element_bytes);
  const int64_t per_block = static_cast<int64_t>(kThreads) * kUnroll;
  const int64_t blocks = (vectors + per_block - 1) / per_block;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks);
}

template <typename T>
cudaError_t forward_as(const void* h, int64_t n, void* out, cudaStream_t stream) {
  forward_kernel<T><<<grid_for(n, sizeof(T)), kThreads, 0, stream>>>(static_cast<const T*>(h), n, static_cast<T*>(out));
  return cudaGetLastError();
}

}  // namespace

cudaError_t gelu_forward(ElementType dtype, const void* h, int64_t n, void* out, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  switch (dtype) {
    case ElementType::kFloat: return forward_as<float>(h, n, out, stream);
    case ElementType::kHalf: return forward_as<__half>(h, n, out, stream);
    case ElementType::kBFloat16: return forward_as<__nv_bfloat16>(h, n, out, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace colo::kernels
