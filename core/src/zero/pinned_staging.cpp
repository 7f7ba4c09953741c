#include <colo/zero/allocate.h>
#include <colo/zero/pinned_staging.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <stdexcept>
#include <utility>

namespace colo::zero {

PinnedStaging::PinnedStaging(const torch::Device& device, PinnedStagingOptions options)
    : options_(options), copies_(device) {
  if (options_.slots() < 1) throw std::invalid_argument("PinnedStaging: at least one slot");
  if (options_.slot_bytes() < 0) throw std::invalid_argument("PinnedStaging: slot_bytes must be >= 0");
}

PinnedStaging::~PinnedStaging() {
  try {
    finish();
  } catch (...) {  // a destructor must not throw; the failure was the training step's to report
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (worker_.joinable()) worker_.join();
}

int64_t PinnedStaging::staging_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(slots_.size()) * options_.slot_bytes();
}

std::size_t PinnedStaging::acquire() {
  std::size_t slot = 0;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] {
      return !free_.empty() || static_cast<int64_t>(slots_.size()) < options_.slots() || failure_;
    });
    if (failure_) std::rethrow_exception(failure_);
    if (free_.empty()) {
      const auto pinned = options_.pin_memory() && device().is_cuda();
      auto buffer = allocate(options_.slot_bytes(), torch::TensorOptions(torch::kCPU).dtype(torch::kByte).pinned_memory(pinned),
                             fmt::format("a host staging buffer (slot {} of {})", slots_.size() + 1, options_.slots()),
                             pinned ? "Set pin_memory=false, or use a smaller chunk_size_mb" : "Use a smaller chunk_size_mb");
      slots_.push_back({std::move(buffer), {}});
      slot = slots_.size() - 1;
    } else {
      slot = free_.back();
      free_.pop_back();
    }
  }
  slots_[slot].in_flight.wait();  // an earlier upload from this slot
  slots_[slot].in_flight = {};
  return slot;
}

void PinnedStaging::release(std::size_t slot) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(slot);
  }
  changed_.notify_all();
}

torch::Tensor PinnedStaging::view(std::size_t slot, c10::ScalarType dtype, int64_t numel) {
  const int64_t bytes = numel * static_cast<int64_t>(c10::elementSize(dtype));
  if (bytes > options_.slot_bytes()) {
    throw std::logic_error(fmt::format("PinnedStaging: a transfer of {} bytes is larger than a slot ({} bytes)", bytes,
                                       options_.slot_bytes()));
  }
  return slots_[slot].buffer.narrow(0, 0, bytes).view(dtype);
}

void PinnedStaging::download(const torch::Tensor& src, std::function<void(const torch::Tensor&)> then) {
  if (!src.is_cuda()) {
    then(src);
    return;
  }
  const auto slot = acquire();
  auto host = view(slot, src.scalar_type(), src.numel());
  auto arrived = copies_.copy(host, src.reshape(-1));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    tasks_.push_back({slot, std::move(host), std::move(arrived), std::move(then)});
    if (!worker_.joinable()) worker_ = std::thread([this] { work(); });
  }
  changed_.notify_all();
}

void PinnedStaging::work() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    changed_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
    if (tasks_.empty()) return;  // stopping
    auto task = std::move(tasks_.front());
    tasks_.pop_front();
    busy_ = true;
    lock.unlock();
    try {
      task.arrived.wait();
      torch::NoGradGuard no_grad;
      task.then(task.host);
    } catch (...) {
      std::lock_guard<std::mutex> failed(mutex_);
      if (!failure_) failure_ = std::current_exception();
    }
    const auto slot = task.slot;
    task = Task{};
    lock.lock();
    busy_ = false;
    free_.push_back(slot);
    changed_.notify_all();
  }
}

void PinnedStaging::upload(const torch::Tensor& dst, const std::function<void(const torch::Tensor&)>& fill) {
  if (!dst.is_cuda()) {
    auto host = torch::empty({dst.numel()}, dst.options().device(torch::kCPU));
    fill(host);
    dst.view({-1}).copy_(host);
    return;
  }
  const auto slot = acquire();
  try {
    auto host = view(slot, dst.scalar_type(), dst.numel());
    fill(host);
    slots_[slot].in_flight = copies_.copy(dst.view({-1}), host);
    uploads_.push_back(slots_[slot].in_flight);
  } catch (...) {
    release(slot);
    throw;
  }
  release(slot);
}

void PinnedStaging::finish() {
  std::exception_ptr failure;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return tasks_.empty() && !busy_; });
    std::swap(failure, failure_);
  }
  for (const auto& upload : uploads_) upload.block_current_stream(device());
  uploads_.clear();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace colo::zero
