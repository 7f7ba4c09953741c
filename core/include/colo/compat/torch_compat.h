// The one place where LibTorch versions differ (the CPU build uses 1.13, the GPU build 2.x).
// CPU build: Debian's libtorch 1.13 (c10d backends derive from c10d::ProcessGroup, no fused
// attention). CUDA build: the wheel's libtorch 2.x (backends derive from c10d::Backend, fused
// scaled_dot_product_attention, NCCL). Code elsewhere calls these names and never tests versions.
// Private to colo's libraries, tests and benchmarks: not installed, and no public header includes
// it (it pulls in c10d's backends, autograd-engine internals and CUDA headers).
#pragma once

#include <torch/torch.h>
#include <torch/version.h>

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>
// PyTorch's wheel ships ProcessGroupGloo.hpp but not the gloo headers it includes; Debian's
// libtorch-dev has both (through libgloo-dev). Without them colo uses NCCL only. Headers outside
// the compiler's own directories (the GPU machine's) are checked by CMake, which then defines
// COLO_HAS_GLOO for every translation unit alike (cmake/ColoDependencies.cmake).
#ifndef COLO_HAS_GLOO
#if __has_include(<gloo/algorithm.h>)
#define COLO_HAS_GLOO 1
#else
#define COLO_HAS_GLOO 0
#endif
#endif
#if COLO_HAS_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#ifdef COLO_WITH_CUDA
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
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
// Whether colo was compiled with Gloo's headers (make_gloo_backend works): always in the CPU
// build; in the CUDA build only where they were provided (the PyTorch wheel ships none).
inline constexpr bool kHasGloo = COLO_HAS_GLOO != 0;

// `loopback_only`: the pairs listen on 127.0.0.1, for a job whose ranks all run on this machine
// (nothing of it need be reachable from another); otherwise on the address this machine's name
// resolves to, as PyTorch does.
inline CommBackendPtr make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                        std::chrono::milliseconds timeout, bool loopback_only) {
#if COLO_HAS_GLOO
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(loopback_only ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                                           : c10d::ProcessGroupGloo::createDefaultDevice());
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
#else
  (void)store, (void)rank, (void)size, (void)timeout, (void)loopback_only;
  throw std::invalid_argument(
      "this colo was built without Gloo headers, so CPU collectives are unavailable; use CUDA tensors (NCCL) or "
      "build against a LibTorch that ships gloo/");
#endif
}

// ---- Stores ----------------------------------------------------------------------------------
// c10d::Store gained a pure virtual clone() (a copy for another thread) in PyTorch 2.x, and
// TCPStoreOptions a listening socket to serve on (masterListenFd); 1.13 has neither. Detected
// rather than tied to a version number.
namespace detail {
template <typename S, typename = void>
struct StoreHasClone : std::false_type {};
template <typename S>
struct StoreHasClone<S, std::void_t<decltype(std::declval<S&>().clone())>> : std::true_type {};
template <typename O, typename = void>
struct TakesListenFd : std::false_type {};
template <typename O>
struct TakesListenFd<O, std::void_t<decltype(std::declval<O&>().masterListenFd = 0)>> : std::true_type {};
}  // namespace detail

// A store of colo's own derives from this: where c10d::Store has clone(), it is answered by
// clone_store().
template <typename Base = c10d::Store, bool = detail::StoreHasClone<Base>::value>
class CloneableStore : public Base {
 protected:
  virtual c10::intrusive_ptr<c10d::Store> clone_store() = 0;
};
template <typename Base>
class CloneableStore<Base, true> : public Base {
 public:
  c10::intrusive_ptr<c10d::Store> clone() override { return clone_store(); }

 protected:
  virtual c10::intrusive_ptr<c10d::Store> clone_store() = 0;
};

// `store`'s clone where stores have one (2.x), else `store` itself (never asked for in 1.13).
template <typename S>
c10::intrusive_ptr<c10d::Store> clone_of(const c10::intrusive_ptr<S>& store) {
  if constexpr (detail::StoreHasClone<S>::value) {
    return store->clone();
  } else {
    return store;
  }
}

// Whether rank 0's TCPStore can serve on a socket colo bound itself (to MASTER_ADDR only): 2.x.
// 1.13's TCPStore binds the port on every interface, and cannot be told otherwise.
inline constexpr bool kTcpStoreServesABoundSocket = detail::TakesListenFd<c10d::TCPStoreOptions>::value;

// Hands `listen_fd` (bound and listening) to the store server where it can take it.
template <typename O>
void serve_on(O& options, int listen_fd) {
  if constexpr (detail::TakesListenFd<O>::value) {
    options.masterListenFd = listen_fd;
  } else {
    (void)options, (void)listen_fd;
  }
}

#ifdef USE_C10D_NCCL
inline CommBackendPtr make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                        std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
}
#endif

// SMs that cuBLAS GEMMs leave free (for NCCL kernels running beside them); nullopt: all SMs.
// PyTorch reads it at every GEMM. Only CUDA builds of LibTorch >= 2.6 have it.
inline void set_gemm_sm_carveout(std::optional<int32_t> sms) {
#if defined(COLO_WITH_CUDA) && COLO_TORCH_AT_LEAST(2, 6)
  at::globalContext()._setSMCarveout_EXPERIMENTAL(sms);
#else
  if (sms) throw std::logic_error("a GEMM SM carve-out needs a CUDA build of LibTorch 2.6 or newer");
#endif
}

// Makes a GPU current for this thread (NCCL and the caching allocator use the current device).
inline void set_current_cuda_device(int index) {
#ifdef COLO_WITH_CUDA
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(index));
#else
  (void)index;
  throw std::logic_error("a CUDA device was requested but colo was built without CUDA");
#endif
}

// The random state of a GPU's default generator (dropout on that GPU draws from it).
inline torch::Tensor cuda_rng_state(const c10::Device& device) {
#ifdef COLO_WITH_CUDA
  return at::cuda::detail::getDefaultCUDAGenerator(device.index()).get_state();
#else
  (void)device;
  throw std::logic_error("a CUDA random state was requested but colo was built without CUDA");
#endif
}
inline void set_cuda_rng_state(const c10::Device& device, const torch::Tensor& state) {
#ifdef COLO_WITH_CUDA
  auto generator = at::cuda::detail::getDefaultCUDAGenerator(device.index());  // a handle; copies share state
  generator.set_state(state);
#else
  (void)device;
  (void)state;
  throw std::logic_error("a CUDA random state was given but colo was built without CUDA");
#endif
}

// Seeds a GPU's default generator (what torch.cuda.manual_seed does for one device).
inline void seed_cuda_rng(const c10::Device& device, uint64_t seed) {
#ifdef COLO_WITH_CUDA
  auto generator = at::cuda::detail::getDefaultCUDAGenerator(device.index());
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_current_seed(seed);
#else
  (void)device;
  (void)seed;
  throw std::logic_error("a CUDA generator was to be seeded but colo was built without CUDA");
#endif
}

// Gloo gained reduce-scatter after 1.13; where it is missing, colo emulates it.
inline bool backend_has_reduce_scatter(const CommBackend& backend) {
  return backend.getBackendName() == "nccl";
}

namespace detail {
template <typename B, typename = void>
struct HasAbort : std::false_type {};
template <typename B>
struct HasAbort<B, std::void_t<decltype(std::declval<B&>().abort())>> : std::true_type {};
}  // namespace detail

// Stops a backend for good: NCCL aborts its communicators and tells its watchdog and heartbeat
// threads to end (LibTorch 2.x). LibTorch 1.13's backends have no such call; there, destroying
// the backend does the same.
// (A template, so that the branch a LibTorch lacks is discarded, not compiled.)
template <typename B = CommBackend>
void abort_backend(B& backend) {
  if constexpr (detail::HasAbort<B>::value) {
    backend.abort();
  } else {
    (void)backend;
  }
}

// The GPU current for this thread; -1 in a build without CUDA.
inline int current_cuda_device() {
#ifdef COLO_WITH_CUDA
  return static_cast<int>(c10::cuda::current_device());
#else
  return -1;
#endif
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

// dst[i].copy_(src[i]) for every i (dtypes may differ). LibTorch 2.x does it in a few
// multi-tensor kernel launches instead of one launch per tensor: for a ViT-B's ~150 parameters,
// twice per step (gradients to fp32 masters, masters back to the working weights).
inline void foreach_copy(at::TensorList dst, at::TensorList src) {
#if COLO_TORCH_AT_LEAST(2, 2)
  if (!dst.empty()) at::_foreach_copy_(dst, src);
#else
  for (size_t i = 0; i < dst.size(); ++i) dst[i].copy_(src[i]);
#endif
}

// Adam (decoupled_weight_decay = false: L2 added to the gradient) or AdamW over tensors of one
// CUDA device and dtype in a single fused kernel, with bias correction; `step` is the step
// number of this update (1 for the first). Returns false without touching anything where
// LibTorch has no such kernel (1.13, CPU tensors) or the kernel cannot take the tensors (it
// needs every tensor contiguous): callers then use multi-tensor ops.
inline bool fused_adam_step(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                            at::TensorList exp_avg_sqs, int64_t step, double lr, double beta1, double beta2,
                            double weight_decay, double eps, bool decoupled_weight_decay) {
#if COLO_TORCH_AT_LEAST(2, 1)
  if (params.empty() || !params[0].is_cuda()) return false;
  for (const auto list : {params, grads, exp_avgs, exp_avg_sqs}) {
    for (const auto& t : list) {
      if (!t.is_contiguous()) return false;
    }
  }
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

// A post hook on a leaf tensor's AccumulateGrad node runs right after autograd has accumulated a
// gradient into tensor.grad(): the mechanism c10d's Reducer uses to start all-reduces during
// backward. The FunctionPostHook signature is the same in 1.13 and 2.x; what differs is the
// node's handle (std::shared_ptr<Node> in 1.13, c10::intrusive_ptr<Node> from 2.x).
using GradAccumulatorPtr = decltype(torch::autograd::impl::grad_accumulator(std::declval<const at::Tensor&>()));

struct GradAccumulatedHook {
  // A tensor holds its accumulator only weakly: whoever registers a hook keeps the node alive,
  // or the hook disappears with it before the next backward.
  GradAccumulatorPtr accumulator;
  uintptr_t key = 0;
};

namespace detail {
class CallbackPostHook : public torch::autograd::FunctionPostHook {
 public:
  explicit CallbackPostHook(std::function<void()> fn) : fn_(std::move(fn)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    fn_();
    return outputs;
  }

 private:
  std::function<void()> fn_;
};
}  // namespace detail

// Runs `fn` (on the autograd thread) each time a backward pass has accumulated into leaf.grad().
// `leaf` must require grad. Remove the hook before whatever `fn` refers to goes away.
inline GradAccumulatedHook add_grad_accumulated_hook(const at::Tensor& leaf, std::function<void()> fn) {
  GradAccumulatedHook hook;
  hook.accumulator = torch::autograd::impl::grad_accumulator(leaf);
  if (!hook.accumulator) {
    throw std::invalid_argument("add_grad_accumulated_hook: the tensor is not a leaf that requires grad");
  }
  hook.key = hook.accumulator->add_post_hook(std::make_unique<detail::CallbackPostHook>(std::move(fn)));
  return hook;
}

inline void remove_grad_accumulated_hook(const GradAccumulatedHook& hook) {
  if (hook.accumulator) hook.accumulator->del_post_hook(hook.key);
}

// A weak reference to an autograd node, of the kind Tensor::grad_fn() hands out: a
// std::shared_ptr up to PyTorch 2.11, a c10::intrusive_ptr later. expired() once the node is gone.
namespace detail {
template <typename Pointer>
struct WeakOf;
template <typename T>
struct WeakOf<std::shared_ptr<T>> {
  using type = std::weak_ptr<T>;
};
template <typename T>
struct WeakOf<c10::intrusive_ptr<T>> {
  using type = c10::weak_intrusive_ptr<T>;
};
}  // namespace detail
using WeakNode = typename detail::WeakOf<std::decay_t<decltype(std::declval<const at::Tensor&>().grad_fn())>>::type;

}  // namespace colo::compat
