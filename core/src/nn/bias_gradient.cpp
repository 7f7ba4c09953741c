#include "bias_gradient.h"

#include <torch/torch.h>

#include "ones_vector.h"

#ifdef COLO_WITH_CUDA_KERNELS
#include "../kernels/column_sum.h"
#include "kernel_launch.h"
#endif

namespace colo::nn::detail {

bool bias_gradient_uses_colo_kernel(const torch::Tensor& rows) {
#ifdef COLO_WITH_CUDA_KERNELS
  kernels::ElementType dtype{};
  return rows.dim() == 2 && rows.size(0) > 0 && vector_ready(rows) && kernel_dtype(rows.scalar_type(), dtype) &&
         rows.size(1) % kernels::column_sum_vector_width(dtype) == 0;
#else
  (void)rows;
  return false;
#endif
}

torch::Tensor bias_gradient(const torch::Tensor& rows) {
#ifdef COLO_WITH_CUDA_KERNELS
  if (bias_gradient_uses_colo_kernel(rows)) {
    kernels::ElementType dtype{};
    kernel_dtype(rows.scalar_type(), dtype);
    const int64_t n = rows.size(0), cols = rows.size(1);
    const int64_t chunks = kernels::column_sum_chunks(dtype, n, cols, rows.device().index());
    // From the caching allocator, as every other tensor of the step: safe under CUDA-graph capture.
    auto scratch = torch::empty({chunks, cols}, rows.options().dtype(torch::kFloat));
    auto out = torch::empty({cols}, rows.options());
    check_launch(kernels::column_sum(dtype, rows.data_ptr(), n, cols, chunks, scratch.data_ptr<float>(),
                                     out.data_ptr(), stream_of(rows)),
                 "colo::nn::linear's bias gradient", rows.device());
    return out;
  }
#endif
  const auto type = rows.scalar_type();
  if (!rows.is_cuda() && (type == torch::kBFloat16 || type == torch::kHalf)) {
    return rows.sum(0, false, torch::kFloat).to(type);
  }
  return at::mv(rows.t(), ones_vector(rows.size(0), rows));
}

}  // namespace colo::nn::detail
