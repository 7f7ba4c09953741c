#pragma once

// fp32 to and from the element types colo's kernels read and write (fp32, fp16, bf16), with
// round-to-nearest-even on the way back, as ATen's casts. Device code only; shared by the .cu files
// of this directory.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace colo::kernels::detail {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

}  // namespace colo::kernels::detail
