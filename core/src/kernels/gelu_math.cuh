#pragma once

// The exact (erf) GELU and its gradient in fp32 as ATen's GeluCUDAKernelImpl and
// GeluBackwardCUDAKernelImpl (kNone) compute them, term for term: shared by colo's GELU kernels
// and the float8 casts that produce fc2's input from fc1's output and fc1's output gradient from
// the GELU's (fp8_cast.h), so that the fused and the unfused forms agree bit for bit.
// Device code only.
namespace colo::kernels::detail {

__device__ __forceinline__ float exact_gelu(float h) {
  constexpr float kSqrtHalf = 0.70710678118654752440f;  // 1 / sqrt(2)
  return h * 0.5f * (1.f + erff(h * kSqrtHalf));
}

// dy * gelu'(x).
__device__ __forceinline__ float exact_gelu_grad(float dy, float x) {
  constexpr float kAlpha = 0.70710678118654752440f;                                  // 1 / sqrt(2)
  constexpr float kBeta = 1.12837916709551257390f * 0.70710678118654752440f * 0.5f;  // 2/sqrt(pi) / sqrt(2) / 2
  const float cdf = 0.5f * (1.f + erff(x * kAlpha));
  const float pdf = expf(-0.5f * x * x) * kBeta;
  return dy * (cdf + x * pdf);
}

}  // namespace colo::kernels::detail
