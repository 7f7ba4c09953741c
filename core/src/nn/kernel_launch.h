#pragma once

// What colo::nn's wrappers of colo's own CUDA kernels (core/src/kernels) share: which tensors the
// kernels take, and the error a failed launch becomes. CUDA builds only; private to core/src/nn.
#ifdef COLO_WITH_CUDA_KERNELS
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "../kernels/element_type.h"

namespace colo::nn::detail {

// The kernels' dtype for a tensor's (fp32, fp16, bf16), or false for any other.
inline bool kernel_dtype(torch::ScalarType type, kernels::ElementType& out) {
  switch (type) {
    case torch::kFloat: out = kernels::ElementType::kFloat; return true;
    case torch::kHalf: out = kernels::ElementType::kHalf; return true;
    case torch::kBFloat16: out = kernels::ElementType::kBFloat16; return true;
    default: return false;
  }
}

inline bool aligned16(const torch::Tensor& t) { return reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0; }

// A CUDA tensor the 16-byte-vector kernels can read or write as it lies: contiguous and aligned.
inline bool vector_ready(const torch::Tensor& t) { return t.is_cuda() && t.is_contiguous() && aligned16(t); }

// The stream colo's kernels run on: the current one of the tensor's device, as ATen's do.
inline cudaStream_t stream_of(const torch::Tensor& t) { return c10::cuda::getCurrentCUDAStream(t.device().index()); }

// Throws when a launch failed, naming the kernel (`what`) and the device, and what to do when the
// build lacks code for this GPU.
inline void check_launch(cudaError_t status, const std::string& what, const torch::Device& device) {
  if (status == cudaSuccess) return;
  throw std::runtime_error(fmt::format(
      "{}: colo's CUDA kernel did not launch on {}: {}{}", what, device.str(), cudaGetErrorString(status),
      status == cudaErrorNoKernelImageForDevice
          ? " (colo was compiled for other GPU architectures: rebuild with -DCOLO_CUDA_ARCHITECTURES=<this GPU's, e.g. 89>)"
          : ""));
}

}  // namespace colo::nn::detail
#endif
