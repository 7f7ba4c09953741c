#pragma once

// The exact (erf) GELU in fp32 as ATen's GeluCUDAKernelImpl (kNone) computes it, term for term:
// shared by colo's GELU kernel and the float8 cast that produces fc2's input from fc1's output
// (fp8_cast.h, Fp8Prologue::kGelu), so that the fused and the unfused forms agree bit for bit.
// Device code only.
namespace colo::kernels::detail {

__device__ __forceinline__ float exact_gelu(float h) {
  constexpr float kSqrtHalf = 0.70710678118654752440f;  // 1 / sqrt(2)
  return h * 0.5f * (1.f + erff(h * kSqrtHalf));
}

}  // namespace colo::kernels::detail
