#pragma once

// The element types colo's row and elementwise kernels take (fp32, fp16, bf16): the host side's
// name for them, which each .cu file maps to float, __half and __nv_bfloat16. Plain C++, no CUDA
// or LibTorch header: the wrappers in core/src/nn include it beside LibTorch's.
namespace colo::kernels {

enum class ElementType { kFloat, kHalf, kBFloat16 };

}  // namespace colo::kernels
