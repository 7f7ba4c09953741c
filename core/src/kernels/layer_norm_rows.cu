#include "layer_norm_rows.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "float_convert.cuh"

namespace colo::kernels {
namespace {

constexpr int kLoadBytes = 16;
constexpr int kWarpsPerBlock = 4;  // one row per warp
constexpr int kMaxVectorsPerLane = 8;

using detail::from_float;
using detail::to_float;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// A 16-byte vector of T, converted to and from fp32.
template <typename T>
struct Vector {
  static constexpr int kSize = kLoadBytes / sizeof(T);
  static __device__ __forceinline__ void load(const T* p, float (&out)[kSize]) {
    const uint4 bits = *reinterpret_cast<const uint4*>(p);
    const T* v = reinterpret_cast<const T*>(&bits);
#pragma unroll
    for (int i = 0; i < kSize; ++i) out[i] = to_float(v[i]);
  }
  static __device__ __forceinline__ void store(T* p, const float (&in)[kSize]) {
    uint4 bits;
    T* v = reinterpret_cast<T*>(&bits);
#pragma unroll
    for (int i = 0; i < kSize; ++i) v[i] = from_float<T>(in[i]);
    *reinterpret_cast<uint4*>(p) = bits;
  }
};

// Lane l holds the vectors l, l + 32, ... of its warp's row: kVectors of them at most.
template <typename T, int kVectors, bool kResidual>
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    forward_rows(const T* __restrict__ x, const T* __restrict__ residual, T* __restrict__ sum,
                 const T* __restrict__ gamma, const T* __restrict__ beta, float eps, int64_t rows, int cols,
                 T* __restrict__ y, float* __restrict__ mean_out, float* __restrict__ rstd_out) {
  using V = Vector<T>;
  constexpr int kSize = V::kSize;
  const int lane = threadIdx.x;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const int vectors = cols / kSize;
  const int64_t base = row * cols;

  float v[kVectors][kSize];
  float total = 0.f;
#pragma unroll
  for (int j = 0; j < kVectors; ++j) {
    const int index = lane + 32 * j;
    if (index < vectors) {
      V::load(x + base + index * kSize, v[j]);
      if constexpr (kResidual) {
        float r[kSize];
        V::load(residual + base + index * kSize, r);
#pragma unroll
        for (int i = 0; i < kSize; ++i) v[j][i] = to_float(from_float<T>(v[j][i] + r[i]));  // the stored sum
        V::store(sum + base + index * kSize, v[j]);
      }
#pragma unroll
      for (int i = 0; i < kSize; ++i) total += v[j][i];
    }
  }
  const float mean = warp_sum(total) / cols;
  // The variance from the deviations held in registers (two passes over registers, one over memory).
  float squares = 0.f;
#pragma unroll
  for (int j = 0; j < kVectors; ++j) {
    if (lane + 32 * j < vectors) {
#pragma unroll
      for (int i = 0; i < kSize; ++i) {
        const float d = v[j][i] - mean;
        squares += d * d;
      }
    }
  }
  const float rstd = rsqrtf(warp_sum(squares) / cols + eps);
#pragma unroll
  for (int j = 0; j < kVectors; ++j) {
    const int index = lane + 32 * j;
    if (index < vectors) {
      float g[kSize];
      float b[kSize];
      V::load(gamma + index * kSize, g);
      if (beta != nullptr) {
        V::load(beta + index * kSize, b);
      } else {
#pragma unroll
        for (int i = 0; i < kSize; ++i) b[i] = 0.f;
      }
      float out[kSize];
#pragma unroll
      for (int i = 0; i < kSize; ++i) out[i] = (v[j][i] - mean) * rstd * g[i] + b[i];
      V::store(y + base + index * kSize, out);
    }
  }
  if (lane == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

// residual_grad and dx may be one tensor: each lane reads its vectors before it writes them.
template <typename T, int kVectors, bool kResidualGrad>
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    input_grad_rows(const T* __restrict__ dy, const T* __restrict__ x, const float* __restrict__ mean,
                    const float* __restrict__ rstd, const T* __restrict__ gamma, const T* residual_grad,
                    int64_t rows, int cols, T* dx) {
  using V = Vector<T>;
  constexpr int kSize = V::kSize;
  const int lane = threadIdx.x;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const int vectors = cols / kSize;
  const int64_t base = row * cols;
  const float mu = mean[row];
  const float rs = rstd[row];

  float g[kVectors][kSize];      // dy * gamma
  float x_hat[kVectors][kSize];
  float sum_g = 0.f;
  float sum_g_x_hat = 0.f;
#pragma unroll
  for (int j = 0; j < kVectors; ++j) {
    const int index = lane + 32 * j;
    if (index < vectors) {
      float w[kSize];
      V::load(dy + base + index * kSize, g[j]);
      V::load(x + base + index * kSize, x_hat[j]);
      V::load(gamma + index * kSize, w);
#pragma unroll
      for (int i = 0; i < kSize; ++i) {
        g[j][i] *= w[i];
        x_hat[j][i] = (x_hat[j][i] - mu) * rs;
        sum_g += g[j][i];
        sum_g_x_hat += g[j][i] * x_hat[j][i];
      }
    }
  }
  const float mean_g = warp_sum(sum_g) / cols;
  const float mean_g_x_hat = warp_sum(sum_g_x_hat) / cols;
#pragma unroll
  for (int j = 0; j < kVectors; ++j) {
    const int index = lane + 32 * j;
    if (index < vectors) {
      float out[kSize];
#pragma unroll
      for (int i = 0; i < kSize; ++i) out[i] = rs * (g[j][i] - mean_g - x_hat[j][i] * mean_g_x_hat);
      if constexpr (kResidualGrad) {
        float r[kSize];
        V::load(residual_grad + base + index * kSize, r);
#pragma unroll
        for (int i = 0; i < kSize; ++i) out[i] += r[i];
      }
      V::store(dx + base + index * kSize, out);
    }
  }
}

int vector_size(ElementType dtype) { return dtype == ElementType::kFloat ? kLoadBytes / 4 : kLoadBytes / 2; }

// Vectors per lane, rounded up: 1 … kMaxVectorsPerLane.
int vectors_per_lane(ElementType dtype, int64_t cols) {
  const int64_t vectors = cols / vector_size(dtype);
  return static_cast<int>((vectors + 31) / 32);
}

unsigned blocks_for(int64_t rows) { return static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock); }

template <typename T, int kVectors>
cudaError_t forward_with(const void* x, const void* residual, void* sum, const void* gamma, const void* beta,
                         float eps, int64_t rows, int64_t cols, void* y, float* mean, float* rstd,
                         cudaStream_t stream) {
  const dim3 block(32, kWarpsPerBlock);
  if (residual != nullptr) {
    forward_rows<T, kVectors, true><<<blocks_for(rows), block, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(residual), static_cast<T*>(sum),
        static_cast<const T*>(gamma), static_cast<const T*>(beta), eps, rows, static_cast<int>(cols),
        static_cast<T*>(y), mean, rstd);
  } else {
    forward_rows<T, kVectors, false><<<blocks_for(rows), block, 0, stream>>>(
        static_cast<const T*>(x), nullptr, nullptr, static_cast<const T*>(gamma), static_cast<const T*>(beta), eps,
        rows, static_cast<int>(cols), static_cast<T*>(y), mean, rstd);
  }
  return cudaGetLastError();
}

template <typename T, int kVectors>
cudaError_t input_grad_with(const void* dy, const void* x, const float* mean, const float* rstd, const void* gamma,
                            const void* residual_grad, int64_t rows, int64_t cols, void* dx, cudaStream_t stream) {
  const dim3 block(32, kWarpsPerBlock);
  if (residual_grad != nullptr) {
    input_grad_rows<T, kVectors, true><<<blocks_for(rows), block, 0, stream>>>(
        static_cast<const T*>(dy), static_cast<const T*>(x), mean, rstd, static_cast<const T*>(gamma),
        static_cast<const T*>(residual_grad), rows, static_cast<int>(cols), static_cast<T*>(dx));
  } else {
    input_grad_rows<T, kVectors, false><<<blocks_for(rows), block, 0, stream>>>(
        static_cast<const T*>(dy), static_cast<const T*>(x), mean, rstd, static_cast<const T*>(gamma), nullptr, rows,
        static_cast<int>(cols), static_cast<T*>(dx));
  }
  return cudaGetLastError();
}

// Instantiates F<T, kVectors> for the row's width (a switch over 1 … 8 vectors per lane).
template <typename T, template <typename, int> class F, typename... Args>
cudaError_t by_width(int vectors, Args... args) {
  switch (vectors) {
    case 1: return F<T, 1>::run(args...);
    case 2: return F<T, 2>::run(args...);
    case 3: return F<T, 3>::run(args...);
    case 4: return F<T, 4>::run(args...);
    case 5: return F<T, 5>::run(args...);
    case 6: return F<T, 6>::run(args...);
    case 7: return F<T, 7>::run(args...);
    case 8: return F<T, 8>::run(args...);
    default: return cudaErrorInvalidValue;
  }
}

template <typename T, int kVectors>
struct Forward {
  template <typename... Args>
  static cudaError_t run(Args... args) { return forward_with<T, kVectors>(args...); }
};

template <typename T, int kVectors>
struct InputGrad {
  template <typename... Args>
  static cudaError_t run(Args... args) { return input_grad_with<T, kVectors>(args...); }
};

template <template <typename, int> class F, typename... Args>
cudaError_t dispatch(ElementType dtype, int vectors, Args... args) {
  switch (dtype) {
    case ElementType::kFloat: return by_width<float, F>(vectors, args...);
    case ElementType::kHalf: return by_width<__half, F>(vectors, args...);
    case ElementType::kBFloat16: return by_width<__nv_bfloat16, F>(vectors, args...);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

bool layer_norm_rows_supported(ElementType dtype, int64_t cols) {
  return cols > 0 && cols % vector_size(dtype) == 0 && vectors_per_lane(dtype, cols) <= kMaxVectorsPerLane;
}

cudaError_t layer_norm_rows_forward(ElementType dtype, const void* x, const void* residual, void* sum,
                                    const void* gamma, const void* beta, float eps, int64_t rows, int64_t cols,
                                    void* y, float* mean, float* rstd, cudaStream_t stream) {
  if (!layer_norm_rows_supported(dtype, cols)) return cudaErrorInvalidValue;
  if (rows <= 0) return cudaSuccess;
  return dispatch<Forward>(dtype, vectors_per_lane(dtype, cols), x, residual, sum, gamma, beta, eps, rows, cols, y,
                           mean, rstd, stream);
}

cudaError_t layer_norm_rows_input_grad(ElementType dtype, const void* dy, const void* x, const float* mean,
                                       const float* rstd, const void* gamma, const void* residual_grad,
                                       int64_t rows, int64_t cols, void* dx, cudaStream_t stream) {
  if (!layer_norm_rows_supported(dtype, cols)) return cudaErrorInvalidValue;
  if (rows <= 0) return cudaSuccess;
  return dispatch<InputGrad>(dtype, vectors_per_lane(dtype, cols), dy, x, mean, rstd, gamma, residual_grad, rows,
                             cols, dx, stream);
}

}  // namespace colo::kernels
