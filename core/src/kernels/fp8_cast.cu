#include "fp8_cast.h"

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "gelu_math.cuh"

namespace colo::kernels {
namespace {

// One block converts a tile of 32 rows x 64 columns: 256 threads, each one 16-byte load of eight
// bf16 values. The row-major copy is written straight from registers (eight bytes per thread);
// the transposed copy goes through shared memory, so that its writes are eight contiguous bytes
// of the token dimension as well.
constexpr int kTileRows = 32;
constexpr int kTileCols = 64;
constexpr int kThreads = 256;
constexpr int kSharedStride = kTileCols + 8;  // bytes per shared row, padded against bank conflicts

// One bf16 value as the cast sees it: itself, or its GELU rounded to bf16 as colo's GELU kernel
// stores it (so that the fused cast's bytes and amax are the unfused pair's).
template <bool kGelu>
__device__ __forceinline__ float2 prologue(const __nv_bfloat162& pair) {
  float2 v = __bfloat1622float2(pair);
  if constexpr (kGelu) {
    v.x = __bfloat162float(__float2bfloat16_rn(detail::exact_gelu(v.x)));
    v.y = __bfloat162float(__float2bfloat16_rn(detail::exact_gelu(v.y)));
  }
  return v;
}

// What a cast kernel reads and computes before it scales: the input, its GELU, or (the GELU's
// backward) dy * gelu'(h) from the input dy and a second tensor h, rounded to bf16 as ATen's
// gelu_backward stores it.
enum class Source { kPlain, kGelu, kGeluGrad };

// Eight values from 16 bytes at `at` of `in` (and of `h` for kGeluGrad), as fp32.
template <Source kSource>
__device__ __forceinline__ void load8(const __nv_bfloat16* in, const __nv_bfloat16* h, int64_t at, float (&v)[8]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(in + at);
  const auto* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
  if constexpr (kSource == Source::kGeluGrad) {
    const uint4 h_raw = *reinterpret_cast<const uint4*>(h + at);
    const auto* h_pairs = reinterpret_cast<const __nv_bfloat162*>(&h_raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 dy = __bfloat1622float2(pairs[i]);
      const float2 x = __bfloat1622float2(h_pairs[i]);
      v[2 * i] = __bfloat162float(__float2bfloat16_rn(detail::exact_gelu_grad(dy.x, x.x)));
      v[2 * i + 1] = __bfloat162float(__float2bfloat16_rn(detail::exact_gelu_grad(dy.y, x.y)));
    }
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = prologue<kSource == Source::kGelu>(pairs[i]);
      v[2 * i] = f.x;
      v[2 * i + 1] = f.y;
    }
  }
}

// Eight values scaled and cast; `bits` becomes the largest |value| seen so far as the bit
// pattern of a non-negative float, whose integer order is the float order with +inf above every
// finite value and NaN (sign cleared) above +inf: so the maximum keeps an overflow visible.
template <__nv_fp8_interpretation_t kFormat>
__device__ uint2 convert8(const float (&v)[8], float scale, int& bits) {
  uint2 out;
  auto* bytes = reinterpret_cast<__nv_fp8x2_storage_t*>(&out);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float2 p = make_float2(v[2 * i], v[2 * i + 1]);
    bits = max(bits, max(__float_as_int(fabsf(p.x)), __float_as_int(fabsf(p.y))));
    p.x *= scale;
    p.y *= scale;
    bytes[i] = __nv_cvt_float2_to_fp8x2(p, __NV_SATFINITE, kFormat);
  }
  return out;
}

// column_partials (kGeluGrad): fp32 [gridDim.x, cols], row b the column sums of tile row b's
// values (as rounded to bf16: what fc1's bias gradient sums), added in a fixed order.
template <__nv_fp8_interpretation_t kFormat, Source kSource>
__global__ void __launch_bounds__(kThreads)
    fp8_scaled_cast_kernel(const __nv_bfloat16* __restrict__ in, const __nv_bfloat16* __restrict__ second, int64_t rows,
                           int64_t cols, const float* amax, const float* given_scale, float format_max,
                           float* inverse_scale, float* amax_out, uint8_t* __restrict__ row_major,
                           uint8_t* __restrict__ transposed, int64_t transposed_ld,
                           float* __restrict__ column_partials) {
  __shared__ __align__(16) uint8_t tile[kTileRows][kSharedStride];
  __shared__ int warp_bits[kThreads / 32];
  float scale;
  float inverse;
  if (given_scale != nullptr) {
    scale = *given_scale;
    inverse = 1.0f / scale;
  } else {
    const float top = fmaxf(*amax, 1e-12f);
    scale = format_max / top;
    inverse = top / format_max;
  }
  if (inverse_scale != nullptr && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *inverse_scale = inverse;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kTileRows;
  const int64_t col0 = static_cast<int64_t>(blockIdx.y) * kTileCols;
  const int t = threadIdx.x;

  // Load and convert: thread t takes row t / 8 of the tile, columns 8 * (t % 8) .. + 7.
  const int r = t / 8;
  const int c = 8 * (t % 8);
  const int64_t row = row0 + r;
  const int64_t col = col0 + c;
  uint2 converted = make_uint2(0, 0);  // zeros past the last row (the transposed copy's padding)
  float v[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  int bits = 0;
  if (row < rows && col < cols) {
    load8<kSource>(in, second, row * cols + col, v);
    converted = convert8<kFormat>(v, scale, bits);
    if (row_major != nullptr) *reinterpret_cast<uint2*>(row_major + row * cols + col) = converted;
  }
  // The block's amax, one atomic per block (amax_out is the same for every thread of the block).
  if (amax_out != nullptr) {
    for (int offset = 16; offset > 0; offset /= 2) bits = max(bits, __shfl_xor_sync(0xffffffffu, bits, offset));
    if (t % 32 == 0) warp_bits[t / 32] = bits;
    __syncthreads();
    if (t == 0) {
      for (int w = 1; w < kThreads / 32; ++w) bits = max(bits, warp_bits[w]);
      atomicMax(reinterpret_cast<int*>(amax_out), bits);
    }
  }
  if constexpr (kSource == Source::kGeluGrad) {
    // A warp holds four rows of the tile (lanes l, l ^ 8, l ^ 16, l ^ 24 share columns): summed
    // by shuffles, then the eight warps' sums in warp order.
    __shared__ float warp_columns[kThreads / 32][kTileCols];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      v[i] += __shfl_xor_sync(0xffffffffu, v[i], 8);
      v[i] += __shfl_xor_sync(0xffffffffu, v[i], 16);
    }
    if (t % 32 < 8) {
#pragma unroll
      for (int i = 0; i < 8; ++i) warp_columns[t / 32][c + i] = v[i];
    }
    __syncthreads();
    if (t < kTileCols && col0 + t < cols) {
      float total = 0.f;
#pragma unroll
      for (int w = 0; w < kThreads / 32; ++w) total += warp_columns[w][t];
      column_partials[static_cast<int64_t>(blockIdx.x) * cols + col0 + t] = total;
    }
  }
  if (transposed == nullptr) return;
  *reinterpret_cast<uint2*>(&tile[r][c]) = converted;
  __syncthreads();

  // Write transposed: thread t takes output row (input column) t / 4, eight input rows from
  // 8 * (t % 4).
  const int oc = t / 4;
  const int orow = 8 * (t % 4);
  const int64_t out_row = col0 + oc;
  const int64_t out_col = row0 + orow;
  if (out_row >= cols || out_col >= transposed_ld) return;
  uint2 packed;
  auto* bytes = reinterpret_cast<uint8_t*>(&packed);
#pragma unroll
  for (int j = 0; j < 8; ++j) bytes[j] = tile[orow + j][oc];
  *reinterpret_cast<uint2*>(transposed + out_row * transposed_ld + out_col) = packed;
}

constexpr int kMaxThreads = 256;

template <bool kGelu>
__global__ void __launch_bounds__(kMaxThreads) bf16_abs_max_kernel(const __nv_bfloat16* __restrict__ in, int64_t n,
                                                                   float* amax) {
  float m = 0.0f;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t vectors = n / 8;
  // Four 16-byte loads in flight per thread and iteration: with one, the loop waits on memory
  // latency and moved half the bytes per second the cast kernel does (benchmarks/RESULTS.md, fp8).
  constexpr int kUnroll = 4;
  const auto* source = reinterpret_cast<const uint4*>(in);
  for (int64_t i = first; i < vectors; i += kUnroll * stride) {
    uint4 raw[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t j = i + u * stride;
      raw[u] = j < vectors ? source[j] : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const auto* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw[u]);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float2 v = prologue<kGelu>(pairs[k]);
        m = fmaxf(m, fmaxf(fabsf(v.x), fabsf(v.y)));
      }
    }
  }
  for (int64_t i = vectors * 8 + first; i < n; i += stride) {
    m = fmaxf(m, fabsf(prologue<kGelu>(__nv_bfloat162(in[i], in[i])).x));
  }
  for (int offset = 16; offset > 0; offset /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
  __shared__ float warp_max[kMaxThreads / 32];
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) m = fmaxf(m, warp_max[w]);
    // Non-negative floats order as their bit patterns do.
    atomicMax(reinterpret_cast<int*>(amax), __float_as_int(m));
  }
}

}  // namespace

cudaError_t bf16_abs_max(const void* in, int64_t n, float* amax, cudaStream_t stream, Fp8Prologue prologue) {
  if (n == 0) return cudaSuccess;
  // Enough blocks to fill every multiprocessor of an H200 a few times; each thread loops over the rest.
  const int64_t wanted = (n / 8 + kMaxThreads - 1) / kMaxThreads;
  const unsigned blocks = static_cast<unsigned>(wanted < 1 ? 1 : (wanted > 1056 ? 1056 : wanted));
  const auto kernel = prologue == Fp8Prologue::kGelu ? bf16_abs_max_kernel<true> : bf16_abs_max_kernel<false>;
  kernel<<<blocks, kMaxThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(in), n, amax);
  return cudaGetLastError();
}

float fp8_max(Fp8Format format) { return format == Fp8Format::kE4M3 ? 448.0f : 57344.0f; }

namespace {

template <Source kSource>
cudaError_t launch_cast(Fp8Format format, const void* in, const void* second, int64_t rows, int64_t cols,
                        const Fp8CastScaling& scaling, void* row_major, void* transposed, int64_t transposed_ld,
                        float* column_partials, cudaStream_t stream) {
  const int64_t covered_rows = transposed != nullptr ? transposed_ld : rows;
  if (covered_rows == 0 || cols == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>((covered_rows + kTileRows - 1) / kTileRows),
                  static_cast<unsigned>((cols + kTileCols - 1) / kTileCols));
  const auto kernel = format == Fp8Format::kE4M3 ? fp8_scaled_cast_kernel<__NV_E4M3, kSource>
                                                 : fp8_scaled_cast_kernel<__NV_E5M2, kSource>;
  kernel<<<grid, kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(in),
                                        static_cast<const __nv_bfloat16*>(second), rows, cols, scaling.amax,
                                        scaling.scale, fp8_max(format), scaling.inverse_scale, scaling.amax_out,
                                        static_cast<uint8_t*>(row_major), static_cast<uint8_t*>(transposed),
                                        transposed_ld, column_partials);
  return cudaGetLastError();
}

bool layout_fits(int64_t rows, int64_t cols, const void* transposed, int64_t transposed_ld) {
  return cols % 8 == 0 && (transposed == nullptr || (transposed_ld % 8 == 0 && transposed_ld >= rows));
}

}  // namespace

cudaError_t fp8_scaled_cast(Fp8Format format, const void* in, int64_t rows, int64_t cols, const Fp8CastScaling& scaling,
                            void* row_major, void* transposed, int64_t transposed_ld, cudaStream_t stream) {
  if (!layout_fits(rows, cols, transposed, transposed_ld) || (scaling.amax == nullptr && scaling.scale == nullptr)) {
    return cudaErrorInvalidValue;
  }
  const auto launch = scaling.prologue == Fp8Prologue::kGelu ? launch_cast<Source::kGelu> : launch_cast<Source::kPlain>;
  return launch(format, in, nullptr, rows, cols, scaling, row_major, transposed, transposed_ld, nullptr, stream);
}

int64_t fp8_cast_row_tiles(int64_t rows, int64_t transposed_ld, bool transposed) {
  const int64_t covered_rows = transposed ? transposed_ld : rows;
  return (covered_rows + kTileRows - 1) / kTileRows;
}

cudaError_t fp8_gelu_backward_cast(Fp8Format format, const void* dy, const void* h, int64_t rows, int64_t cols,
                                   const Fp8CastScaling& scaling, void* row_major, void* transposed,
                                   int64_t transposed_ld, float* column_partials, cudaStream_t stream) {
  if (!layout_fits(rows, cols, transposed, transposed_ld) || scaling.scale == nullptr || dy == nullptr ||
      h == nullptr || column_partials == nullptr || scaling.prologue != Fp8Prologue::kNone) {
    return cudaErrorInvalidValue;
  }
  return launch_cast<Source::kGeluGrad>(format, dy, h, rows, cols, scaling, row_major, transposed, transposed_ld,
                                        column_partials, stream);
}

}  // namespace colo::kernels
