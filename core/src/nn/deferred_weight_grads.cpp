#include <colo/nn/deferred_weight_grads.h>

#include <atomic>
#include <stdexcept>

namespace colo::nn {
namespace {

std::atomic<DeferredWeightGrads*> g_active{nullptr};

}  // namespace

void DeferredWeightGrads::add(std::function<void()> work) {
  std::lock_guard<std::mutex> lock(mutex_);
  work_.push_back(std::move(work));
}

void DeferredWeightGrads::run() {
  std::vector<std::function<void()>> work;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    work.swap(work_);
  }
  torch::NoGradGuard no_grad;
  for (auto& w : work) w();
}

std::size_t DeferredWeightGrads::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return work_.size();
}

WeightGradDeferral::WeightGradDeferral(DeferredWeightGrads& store) {
  DeferredWeightGrads* expected = nullptr;
  if (!g_active.compare_exchange_strong(expected, &store)) {
    throw std::logic_error("WeightGradDeferral: another deferral is active; they do not nest");
  }
}

WeightGradDeferral::~WeightGradDeferral() { g_active.store(nullptr); }

DeferredWeightGrads* WeightGradDeferral::active() { return g_active.load(); }

void accumulate_grad(const torch::Tensor& param, const torch::Tensor& grad) {
  torch::NoGradGuard no_grad;
  auto& current = const_cast<torch::Tensor&>(param).mutable_grad();
  if (!current.defined()) {
    current = grad.detach().clone(at::MemoryFormat::Contiguous);
  } else {
    current.add_(grad);
  }
}

}  // namespace colo::nn
