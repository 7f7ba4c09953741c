#pragma once

// bfloat16 -> float8 with a per-tensor scale, as colo's own CUDA kernel (CUDA builds only).
//
// colo::nn::fp8_linear needs each operand of its three products in float8, and cuBLASLt's float8
// products take the reduced (K) dimension contiguous in both operands: the forward's input as it
// is (rows of K), the weight gradient's operands transposed (the token dimension contiguous). ATen
// would make each of those with three passes (scale, cast, transpose copy); this kernel reads the
// bf16 tensor once and writes the row-major and/or the transposed float8 copy, the scale read on
// the device (no host sync), and under delayed scaling records the operand's amax in the same pass.
//
// Kept free of LibTorch headers: nvcc compiles it alone; colo::nn::fp8_linear wraps it.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace colo::kernels {

// e4m3 (largest finite 448; the forward's operands) or e5m2 (57344; gradients).
enum class Fp8Format { kE4M3, kE5M2 };

// The largest finite value of `format`.
float fp8_max(Fp8Format format);

// What the cast (and the max|x| pass before it) computes from each bf16 value before scaling it:
// the value itself, or the exact (erf) GELU of it rounded to bf16 — what colo's GELU kernel would
// have written — so that fc1's output becomes fc2's float8 input in one pass, the bf16 activation
// never written (issue 39's producers). Fused and unfused give the same bytes and the same amax.
enum class Fp8Prologue { kNone, kGelu };

// Writes max |in| over n bf16 values into *amax, which the caller zeroes first (blocks combine
// their maxima with an atomic max; NaNs are skipped here and propagate through the cast instead).
// in must be 16-byte aligned. One pass at memory speed, where ATen's linalg_vector_norm(inf)
// reduction took a tenth of a ViT-L/16 fp8 step (benchmarks/RESULTS.md, 2026-11-24 fp8).
// Under Fp8Prologue::kGelu the maximum is over gelu(in) (rounded to bf16) instead.
cudaError_t bf16_abs_max(const void* in, int64_t n, float* amax, cudaStream_t stream,
                         Fp8Prologue prologue = Fp8Prologue::kNone);

// How fp8_scaled_cast scales, where its scale comes from and where its amax goes.
//   current scaling (scale null): scale = fp8_max / max(*amax, 1e-12), *amax the operand's own max|x|
//     (bf16_abs_max, a pass before the cast);
//   delayed scaling (scale set, issue 39): *scale as given (from earlier steps' amaxes; amax unused),
//     and the cast itself records max|in| into *amax_out in the same pass.
// inverse_scale: where to write 1 / scale (the factor at::_scaled_mm takes to undo the cast), or
// null. amax_out: null, or one fp32 value on the device that becomes max(*amax_out, max|in|)
// (blocks combine with an atomic max). Unlike bf16_abs_max, infinities and NaNs reach it (an inf
// makes it inf, a NaN NaN), so that a delayed-scaling history sees the overflow.
// prologue: what is cast (and recorded into amax_out): the input, or its GELU.
struct Fp8CastScaling {
  const float* amax = nullptr;
  const float* scale = nullptr;
  float* inverse_scale = nullptr;
  float* amax_out = nullptr;
  Fp8Prologue prologue = Fp8Prologue::kNone;
};

// in: bf16 [rows, cols], row-major, contiguous. row_major: [rows, cols] float8 or null.
// transposed: [cols, transposed_ld] float8 or null, row r of `in` in its column r; columns
// rows..transposed_ld-1 are written as zeros (padding of the token dimension to the multiple of 16
// cuBLASLt's float8 products need). out = saturate(prologue(in) * scale). Returns the launch's error
// (cudaSuccess when the kernels were queued; cudaErrorInvalidValue for neither amax nor scale).
cudaError_t fp8_scaled_cast(Fp8Format format, const void* in, int64_t rows, int64_t cols, const Fp8CastScaling& scaling,
                            void* row_major, void* transposed, int64_t transposed_ld, cudaStream_t stream);

// fc1's float8 output gradient made inside the GELU's backward (issue 39's producers): what
// at::gelu_backward(dy, h) writes (dy * gelu'(h), exact erf form, rounded to bf16) cast as
// fp8_scaled_cast casts it (both layouts, 1 / scale written, max|value| recorded into amax_out),
// plus its column sums for fc1's bias gradient, so that the bf16 gradient is never written or read
// back. column_partials: fp32 [fp8_cast_row_tiles(rows, transposed_ld, transposed != null), cols],
// row b the sums of the values of rows 32b .. 32b+31 (zeros past the last row), for
// column_sum_add_chunks (column_sum.h). dy and h: bf16 [rows, cols], 16-byte aligned. The scale
// must be given (delayed scaling: dx's amax is not known before this pass) and scaling.prologue
// kNone; anything else is cudaErrorInvalidValue.
cudaError_t fp8_gelu_backward_cast(Fp8Format format, const void* dy, const void* h, int64_t rows, int64_t cols,
                                   const Fp8CastScaling& scaling, void* row_major, void* transposed,
                                   int64_t transposed_ld, float* column_partials, cudaStream_t stream);

// The first dimension of fp8_gelu_backward_cast's column_partials.
int64_t fp8_cast_row_tiles(int64_t rows, int64_t transposed_ld, bool transposed);

// The current-scaling form of the above (amax given, inverse scale written, no amax recorded).
inline cudaError_t fp8_scaled_cast(Fp8Format format, const void* in, int64_t rows, int64_t cols, const float* amax,
                                   float* inverse_scale, void* row_major, void* transposed, int64_t transposed_ld,
                                   cudaStream_t stream) {
  Fp8CastScaling scaling;
  scaling.amax = amax;
  scaling.inverse_scale = inverse_scale;
  return fp8_scaled_cast(format, in, rows, cols, scaling, row_major, transposed, transposed_ld, stream);
}

}  // namespace colo::kernels
