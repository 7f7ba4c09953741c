#pragma once

// The exact (erf) GELU and its gradient as CUDA kernels of colo's own (CUDA builds only):
//   gelu(h) = h * Phi(h)      gelu'(h) = Phi(h) + h * phi(h)
// with Phi and phi the standard normal's CDF and density, computed in fp32 as ATen does, so the
// results are ATen's (timm's nn.GELU()). Elementwise, 16-byte loads and stores, four loads in
// flight per thread: ATen's kernels reached ~2.8 TB/s (forward) and ~3.4 TB/s (backward)
// at ViT-B's MLP shape on an H200 whose copy bandwidth is ~4 TB/s
// (benchmarks/peers/fusion_probe.py). Kept free of LibTorch headers: nvcc compiles it alone.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "layer_norm_affine_grad.h"

namespace colo::kernels {

// The dtypes are LayerNorm's (float, half, bfloat16); every pointer must be 16-byte aligned.
// out = gelu(h) over n elements. out may alias h.
cudaError_t gelu_forward(LayerNormDtype dtype, const void* h, int64_t n, void* out, cudaStream_t stream);

// dh = dout * gelu'(h) over n elements. dh may alias dout.
cudaError_t gelu_backward(LayerNormDtype dtype, const void* dout, const void* h, int64_t n, void* dh,
                          cudaStream_t stream);

}  // namespace colo::kernels
