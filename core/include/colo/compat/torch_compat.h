// The one place where LibTorch versions differ (DESIGN.md, "Two builds of one code base").
// CPU build: Debian's libtorch 1.13 (c10d backends derive from c10d::ProcessGroup, no fused
// attention). CUDA build: the wheel's libtorch 2.x (backends derive from c10d::Backend, fused
// scaled_dot_product_attention, NCCL). Code elsewhere calls these names and never tests versions.
#pragma once

#include <torch/torch.h>
#include <torch/version.h>

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#ifdef COLO_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

#include <chrono>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#define COLO_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace colo::compat {

// The c10d type that Gloo and NCCL implement: ProcessGroup in 1.13, Backend from 2.0 on.
#if COLO_TORCH_AT_LEAST(2, 0)
using CommBackend = c10d::Backend;
#else
using CommBackend = c10d::ProcessGroup;
#endif
using CommBackendPtr = c10::intrusive_ptr<CommBackend>;

inline constexpr bool kHasFusedAttention = COLO_TORCH_AT_LEAST(2, 0);
inline constexpr bool kHasNccl =
#ifdef USE_C10D_NCCL
    true;
#else
    false;
#endif

// The LibTorch version colo was compiled against ("1.13.1", "2.11.0"): plugins must match it.
inline std::string torch_version_string() { return TORCH_VERSION; }

inline CommBackendPtr make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                        std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
}

#ifdef USE_C10D_NCCL
inline CommBackendPtr make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                        std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
}
#endif

// Makes a GPU current for this thread (NCCL and the caching allocator use the current device).
inline void set_current_cuda_device(int index) {
#ifdef COLO_WITH_CUDA
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(index));
#else
  (void)index;
  throw std::logic_error("a CUDA device was requested but colo was built without CUDA");
#endif
}

// Gloo gained reduce-scatter after 1.13; where it is missing, colo emulates it.
inline bool backend_has_reduce_scatter(const CommBackend& backend) {
  return backend.getBackendName() == "nccl";
}

// Groups several point-to-point operations so that NCCL launches them together (a pair of
// ranks that both send first would otherwise deadlock). Gloo's send/recv are already
// asynchronous, so there it is a no-op.
inline void start_coalescing(CommBackend& backend) {
#if COLO_TORCH_AT_LEAST(2, 0) && defined(USE_C10D_NCCL)
  if (backend.getBackendName() == "nccl") backend.startCoalescing();
#else
  (void)backend;
#endif
}
inline c10::intrusive_ptr<c10d::Work> end_coalescing(CommBackend& backend) {
#if COLO_TORCH_AT_LEAST(2, 0) && defined(USE_C10D_NCCL)
  if (backend.getBackendName() == "nccl") return backend.endCoalescing();
#else
  (void)backend;
#endif
  return {};
}

// softmax(q kᵀ / √d) v over [batch, heads, tokens, head_dim]. Fused kernels where LibTorch has
// them; the exact math path otherwise (bit-for-bit what timm computes without fused attention).
inline torch::Tensor scaled_dot_product_attention(const torch::Tensor& q, const torch::Tensor& k,
                                                  const torch::Tensor& v, double dropout_p) {
#if COLO_TORCH_AT_LEAST(2, 0)
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, dropout_p);
#else
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  auto attn = torch::matmul(q * scale, k.transpose(-2, -1)).softmax(-1);
  if (dropout_p > 0.0) attn = torch::dropout(attn, dropout_p, /*train=*/true);
  return torch::matmul(attn, v);
#endif
}

// Key of torch::optim::Optimizer::state() for a parameter: its TensorImpl's address printed as
// a string in 1.13, the address itself from 2.x on. Optimizers written outside LibTorch must
// use the same key, or torch's serialize() and load() lose their state.
using OptimizerStateKey = std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>::key_type;
template <typename Key = OptimizerStateKey>
Key optimizer_state_key(const at::Tensor& param) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream out;  // what 1.13's c10::guts::to_string(TensorImpl*) prints
    out << static_cast<const void*>(param.unsafeGetTensorImpl());
    return out.str();
  } else {
    return param.unsafeGetTensorImpl();
  }
}

// Adam (decoupled_weight_decay = false: L2 added to the gradient) or AdamW over tensors of one
// CUDA device and dtype in a single fused kernel, with bias correction; `step` is the step
// number of this update (1 for the first). Returns false without touching anything where
// LibTorch has no such kernel (1.13, or CPU tensors): callers then use multi-tensor ops.
inline bool fused_adam_step(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                            at::TensorList exp_avg_sqs, int64_t step, double lr, double beta1, double beta2,
                            double weight_decay, double eps, bool decoupled_weight_decay) {
#if COLO_TORCH_AT_LEAST(2, 1)
  if (params.empty() || !params[0].is_cuda()) return false;
  // The kernel only reads the step counts, so one tensor can serve every parameter.
  const auto step_tensor = at::full({}, static_cast<double>(step), params[0].options().dtype(at::kFloat));
  const std::vector<at::Tensor> steps(params.size(), step_tensor);
  const std::vector<at::Tensor> no_max_exp_avg_sqs;  // amsgrad off
  if (decoupled_weight_decay) {
    at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, no_max_exp_avg_sqs, steps, lr, beta1, beta2,
                      weight_decay, eps, /*amsgrad=*/false, /*maximize=*/false);
  } else {
    at::_fused_adam_(params, grads, exp_avgs, exp_avg_sqs, no_max_exp_avg_sqs, steps, lr, beta1, beta2,
                     weight_decay, eps, /*amsgrad=*/false, /*maximize=*/false);
  }
  return true;
#else
  (void)params, (void)grads, (void)exp_avgs, (void)exp_avg_sqs, (void)step, (void)lr, (void)beta1, (void)beta2,
      (void)weight_decay, (void)eps, (void)decoupled_weight_decay;
  return false;
#endif
}

}  // namespace colo::compat
