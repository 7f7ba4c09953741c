#include <ATen/CPUGeneratorImpl.h>
#include <colo/compat/torch_compat.h>
#include <colo/shardformer/rng_tracker.h>

#include <stdexcept>

namespace colo::shardformer {
namespace {

// Megatron's offset between the default seed and the tensor-parallel streams.
constexpr uint64_t kOffset = 2718;

}  // namespace

RngTracker::RngTracker(uint64_t seed, int64_t tp_rank, c10::Device device) : device_(device) {
  const uint64_t region_seed = seed + kOffset + static_cast<uint64_t>(tp_rank);
  cpu_state_ = at::detail::createCPUGenerator(region_seed).get_state();
  if (device_.is_cuda()) {
    const auto keep = compat::cuda_rng_state(device_);
    compat::seed_cuda_rng(device_, region_seed);
    cuda_state_ = compat::cuda_rng_state(device_);
    compat::set_cuda_rng_state(device_, keep);
  }
}

void RngTracker::enter() {
  if (inside_) throw std::logic_error("RngTracker: entered twice (regions do not nest)");
  auto cpu = at::detail::getDefaultCPUGenerator();  // a handle; copies share state
  saved_cpu_ = cpu.get_state();
  cpu.set_state(cpu_state_);
  if (device_.is_cuda()) {
    saved_cuda_ = compat::cuda_rng_state(device_);
    compat::set_cuda_rng_state(device_, cuda_state_);
  }
  inside_ = true;
}

void RngTracker::exit() {
  auto cpu = at::detail::getDefaultCPUGenerator();
  cpu_state_ = cpu.get_state();
  cpu.set_state(saved_cpu_);
  if (device_.is_cuda()) {
    cuda_state_ = compat::cuda_rng_state(device_);
    compat::set_cuda_rng_state(device_, saved_cuda_);
  }
  inside_ = false;
}

std::vector<torch::Tensor> RngTracker::save_state() const {
  if (inside_) throw std::logic_error("RngTracker::save_state: inside the region (save it outside)");
  if (cuda_state_.defined()) return {cpu_state_.clone(), cuda_state_.clone()};
  return {cpu_state_.clone()};
}

void RngTracker::restore_state(const std::vector<torch::Tensor>& state) {
  if (inside_) throw std::logic_error("RngTracker::restore_state: inside the region (restore it outside)");
  if (state.size() != (cuda_state_.defined() ? 2u : 1u)) {
    throw std::invalid_argument("RngTracker::restore_state: expected the tensors of save_state");
  }
  cpu_state_ = state[0].clone();
  if (state.size() == 2) cuda_state_ = state[1].clone();
}

}  // namespace colo::shardformer
