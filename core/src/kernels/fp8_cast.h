#pragma once

// bfloat16 -> float8 with a per-tensor scale, as colo's own CUDA kernel (CUDA builds only).
//
// colo::nn::fp8_linear needs each operand of its three products in float8, and cuBLASLt's float8
// products take the reduced (K) dimension contiguous in both operands: the forward's input as it
// is (rows of K), the weight gradient's operands transposed (the token dimension contiguous). ATen
// would make each of those with three passes (scale, cast, transpose copy); this kernel reads the
// bf16 tensor once and writes the row-major and/or the transposed float8 copy, the scale read on
// the device (no host sync): out = saturate(in * fp8_max / max(amax, 1e-12)).
//
// Kept free of LibTorch headers: nvcc compiles it alone; colo::nn::fp8_linear wraps it.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace colo::kernels {

// e4m3 (largest finite 448; the forward's operands) or e5m2 (57344; gradients).
enum class Fp8Format { kE4M3, kE5M2 };

// The largest finite value of `format`.
float fp8_max(Fp8Format format);

// Writes max |in| over n bf16 values into *amax, which the caller zeroes first (blocks combine
// their maxima with an atomic max; NaNs are skipped here and propagate through the cast instead).
// in must be 16-byte aligned. One pass at memory speed, where ATen's linalg_vector_norm(inf)
// reduction took a tenth of a ViT-L/16 fp8 step (benchmarks/RESULTS.md, 2026-11-24 fp8).
cudaError_t bf16_abs_max(const void* in, int64_t n, float* amax, cudaStream_t stream);

// in: bf16 [rows, cols], row-major, contiguous. amax: one fp32 value on the device (the largest
// |in|). inverse_scale: where to write max(amax, 1e-12) / fp8_max (the factor _scaled_mm takes),
// or null. row_major: [rows, cols] float8 or null. transposed: [cols, transposed_ld] float8 or null,
// row r of `in` in its column r; columns rows..transposed_ld-1 are written as zeros (padding of
// the token dimension to the multiple of 16 cuBLASLt's float8 products need). Returns the
// launch's error (cudaSuccess when the kernels were queued).
cudaError_t fp8_scaled_cast(Fp8Format format, const void* in, int64_t rows, int64_t cols, const float* amax,
                            float* inverse_scale, void* row_major, void* transposed, int64_t transposed_ld,
                            cudaStream_t stream);

}  // namespace colo::kernels
