#pragma once

#include <colo/dist/process_group.h>

#include <functional>
#include <optional>

namespace colo::dist {

// COLO_BACKEND chooses the c10d backend of every group of a job: `gloo` or `nccl`. Unset (or
// empty), a job runs on NCCL where this LibTorch has NCCL and a CUDA GPU is visible, on Gloo
// otherwise, each rank on its own GPU (cuda:<local rank>) or on the CPU.
//
// COLO_BACKEND=gloo where CUDA GPUs are visible puts every rank of the node on GPU 0 (cuda:0),
// with CUDA tensors over Gloo: Gloo's collectives copy them through host memory, and colo's
// point-to-point operations do the same (ProcessGroup::send). It lets the multi-rank CUDA code
// paths run on a machine with one GPU, which NCCL refuses (two ranks on one GPU); it is for
// tests, not for speed, and is never chosen unless asked for. See tests/gpu/README.md.

// What COLO_BACKEND asks for; nullopt when unset or empty. Any other value than the two names
// (whole, lower case) is a std::invalid_argument naming the variable, its value and the choices.
std::optional<Backend> requested_backend(const std::function<const char*(const char*)>& lookup);
// The same, from the process environment.
std::optional<Backend> requested_backend();

// What this process can run on.
struct BackendSupport {
  bool cuda = false;  // LibTorch sees a CUDA GPU
  bool nccl = false;  // LibTorch has NCCL
  bool gloo = false;  // colo was compiled with Gloo's headers (compat::kHasGloo)

  static BackendSupport of_this_process();
};

struct BackendChoice {
  Backend backend = Backend::kGloo;
  // Every rank of the node on cuda:0 (COLO_BACKEND=gloo where CUDA GPUs are visible).
  bool share_first_gpu = false;
};

// The backend for `requested` (nullopt: the default above) where `support` holds. A request that
// cannot work there is a std::invalid_argument that says why and what to set instead.
BackendChoice choose_backend(std::optional<Backend> requested, const BackendSupport& support);
// choose_backend(requested_backend(), BackendSupport::of_this_process()).
BackendChoice backend_choice();

}  // namespace colo::dist
