#pragma once

// The exact (erf) GELU's backward fused with the bias gradient of the linear layer before it (the
// MLP's fc1), as a CUDA kernel of colo's own (CUDA builds only). Unfused, ATen's gelu_backward
// writes dx = dy * gelu'(h) and fc1's bias gradient then reads all of dx again to sum its rows
// (ViT-Ti/16 at batch 256: 77 MB a block); here the sums are taken from registers as dx is
// written, per chunk of rows, and column_sum_add_chunks (column_sum.h) adds the chunks. dx is ATen's
// arithmetic term for term (fp32); the sums are of dx as rounded to its dtype, the values fc1's
// weight gradient multiplies, so the bias gradient is the unfused path's up to the order of sums.
//
// Kept free of LibTorch headers: nvcc compiles it alone; colo::nn's linear_gelu wraps it.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "element_type.h"

namespace colo::kernels {

// How many row chunks the kernel splits `rows` into on `device` (the scratch's first dimension):
// more than column_sum's, as the erf and exp arithmetic, not memory, bound it and want every
// thread a multiprocessor can hold.
int64_t gelu_backward_column_chunks(ElementType dtype, int64_t rows, int64_t cols, int device);

// dy, h and dx are row-major [rows, cols] of `dtype`, 16-byte aligned, cols a multiple of
// column_sum_vector_width(dtype); dx may alias dy. scratch is fp32 [chunks, cols] (chunks from
// gelu_backward_column_chunks), each row a chunk's column sums of dx. Returns the launch's error.
cudaError_t gelu_backward_column_partials(ElementType dtype, const void* dy, const void* h, int64_t rows, int64_t cols,
                                          int64_t chunks, void* dx, float* scratch, cudaStream_t stream);

}  // namespace colo::kernels
