#include "kernel_trace.h"

#include <colo/compat/torch_compat.h>

#include <stdexcept>

#if COLO_TORCH_AT_LEAST(2, 0) && __has_include(<torch/csrc/autograd/profiler_kineto.h>)
#include <torch/csrc/autograd/profiler_kineto.h>
#define COLO_HAS_KINETO_TRACE 1
#else
#define COLO_HAS_KINETO_TRACE 0
#endif

namespace colo::bench {

#if COLO_HAS_KINETO_TRACE
namespace {
namespace impl = torch::profiler::impl;
const impl::ProfilerConfig& config() {
  static const impl::ProfilerConfig value(impl::ProfilerState::KINETO);
  return value;
}
const std::set<impl::ActivityType>& activities() {
  static const std::set<impl::ActivityType> value{impl::ActivityType::CPU, impl::ActivityType::CUDA};
  return value;
}
}  // namespace

void KernelTrace::start() {
  torch::autograd::profiler::prepareProfiler(config(), activities());
  torch::autograd::profiler::enableProfiler(config(), activities());
}

void KernelTrace::stop_and_save(const std::string& path) { torch::autograd::profiler::disableProfiler()->save(path); }
#else
void KernelTrace::start() {
  throw std::runtime_error("--profile needs LibTorch 2.x with Kineto (the CUDA build); this LibTorch has no trace API");
}
void KernelTrace::stop_and_save(const std::string&) {}
#endif

}  // namespace colo::bench
