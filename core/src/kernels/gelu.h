#pragma once

// The exact (erf) GELU's forward as a CUDA kernel of colo's own (CUDA builds only):
//   gelu(h) = h * Phi(h), Phi the standard normal's CDF, computed in fp32 as ATen does, so the
// results are ATen's (timm's nn.GELU()). Elementwise, 16-byte loads and stores, four loads in
// flight per thread, faster than ATen's at ViT-B/16's MLP shape (50432 x 3072 bf16; the
// measurement is in benchmarks/RESULTS.md). The backward of gelu alone stays ATen's gelu_backward
// (colo's kernel for it alone was no faster: the erf and exp arithmetic, not memory, bound both;
// benchmarks/RESULTS.md); after the MLP's fc1 it is gelu_backward_bias.h, which also sums fc1's
// bias gradient. Kept free of LibTorch headers: nvcc compiles it alone.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "element_type.h"

namespace colo::kernels {

// Every pointer must be 16-byte aligned.
// out = gelu(h) over n elements. out may alias h.
cudaError_t gelu_forward(ElementType dtype, const void* h, int64_t n, void* out, cudaStream_t stream);

}  // namespace colo::kernels
