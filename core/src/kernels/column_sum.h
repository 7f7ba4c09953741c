#pragma once

// A linear layer's bias gradient, the sum of the output gradient's rows, as a CUDA kernel of
// colo's own (CUDA builds only). cuBLAS's matrix-vector product with a ones vector (what colo and
// ATen's at::mv use) reads a [50432, 576] bf16 gradient (ViT-Ti/16 at batch 256) at about a third of
// an H200's memory bandwidth, and cuBLASLt's bias-gradient epilogue on the weight gradient's product
// was slower still at ViT shapes (benchmarks/RESULTS.md, 2026-11-28). This one reads each element
// once with 16-byte loads, four rows in flight per thread, sums in fp32 per chunk of rows, then a
// second kernel adds the chunks' sums in a fixed order and rounds once: deterministic, so a CUDA
// graph's replay and the eager step agree bit for bit.
//
// Kept free of LibTorch headers: nvcc compiles it alone; colo::nn's linear wraps it.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "element_type.h"

namespace colo::kernels {

// Elements per 16-byte load: `cols` must be a multiple of it, and the input 16-byte aligned.
int column_sum_vector_width(ElementType dtype);

// How many row chunks the sum is split into on `device`: the first dimension of the fp32 scratch
// ([chunks, cols]) the caller allocates.
int64_t column_sum_chunks(ElementType dtype, int64_t rows, int64_t cols, int device);

// out[c] = sum over r of x[r, c], for a row-major [rows, cols] x; out has x's dtype (fp32 sums,
// rounded once). scratch is fp32 [chunks, cols]. Returns the first launch error.
cudaError_t column_sum(ElementType dtype, const void* x, int64_t rows, int64_t cols, int64_t chunks, float* scratch,
                       void* out, cudaStream_t stream);

// The second half of column_sum alone: out[c] = the sum over j of scratch[j, c], rounded once to
// out's dtype, for a kernel that wrote the chunks' sums itself (gelu_backward_bias.h).
cudaError_t column_sum_add_chunks(ElementType dtype, const float* scratch, int64_t chunks, int64_t cols, void* out,
                                  cudaStream_t stream);

}  // namespace colo::kernels
