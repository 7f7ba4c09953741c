#include <colo/compat/torch_compat.h>
#include <colo/dist/backend_choice.h>

#include <fmt/format.h>
#include <torch/cuda.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace colo::dist {
namespace {

constexpr const char* kBackendVariable = "COLO_BACKEND";

}  // namespace

std::optional<Backend> requested_backend(const std::function<const char*(const char*)>& lookup) {
  // The one place COLO_BACKEND is read. (When colo::env's readers land, env::text does the lookup.)
  const char* raw = lookup(kBackendVariable);
  if (raw == nullptr || *raw == '\0') return std::nullopt;
  const std::string value = raw;
  if (value == "gloo") return Backend::kGloo;
  if (value == "nccl") return Backend::kNccl;
  throw std::invalid_argument(
      fmt::format("environment variable {}='{}' is not a backend: set it to gloo or nccl (lower case), or unset it "
                  "for the default (NCCL where a CUDA GPU is visible, else Gloo)",
                  kBackendVariable, value));
}

std::optional<Backend> requested_backend() {
  return requested_backend([](const char* name) { return std::getenv(name); });
}

BackendSupport BackendSupport::of_this_process() {
  BackendSupport support;
  support.cuda = torch::cuda::is_available();
  support.nccl = compat::kHasNccl;
  support.gloo = compat::kHasGloo;
  return support;
}

BackendChoice choose_backend(std::optional<Backend> requested, const BackendSupport& support) {
  BackendChoice choice;
  if (!requested) {
    choice.backend = support.nccl && support.cuda ? Backend::kNccl : Backend::kGloo;
    return choice;
  }
  if (*requested == Backend::kNccl) {
    if (!support.nccl) {
      throw std::invalid_argument(fmt::format(
          "{}=nccl: this LibTorch has no NCCL (a CPU build); unset {} or set it to gloo", kBackendVariable, kBackendVariable));
    }
    if (!support.cuda) {
      throw std::invalid_argument(
          fmt::format("{}=nccl: no CUDA GPU is visible to this process (check CUDA_VISIBLE_DEVICES and the driver), "
                      "and NCCL takes CUDA tensors only; unset {} or set it to gloo",
                      kBackendVariable, kBackendVariable));
    }
    choice.backend = Backend::kNccl;
    return choice;
  }
  if (!support.gloo) {
    throw std::invalid_argument(fmt::format(
        "{}=gloo: this colo was compiled without Gloo's headers (the PyTorch wheel ships none), so it has no Gloo "
        "backend: give CMake gloo's headers (tests/gpu/README.md says how) and rebuild, or unset {}",
        kBackendVariable, kBackendVariable));
  }
  choice.backend = Backend::kGloo;
  choice.share_first_gpu = support.cuda;
  return choice;
}

BackendChoice backend_choice() { return choose_backend(requested_backend(), BackendSupport::of_this_process()); }

}  // namespace colo::dist
