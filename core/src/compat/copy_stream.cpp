#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <colo/compat/copy_stream.h>
#include <colo/compat/torch_compat.h>
#include <torch/torch.h>

#include <thread>

namespace colo::compat {
namespace {

c10::impl::VirtualGuardImpl guard_impl(const torch::Device& device) {
  return c10::impl::VirtualGuardImpl(device.type());
}

std::shared_ptr<c10::Event> record_on(const c10::Stream& stream) {
  auto event = std::make_shared<c10::Event>(stream.device_type());
  event->record(stream);
  return event;
}

}  // namespace

StreamEvent StreamEvent::on_current_stream(const torch::Device& device) {
  StreamEvent done;
  if (device.is_cuda()) done.event_ = record_on(guard_impl(device).getStream(device));
  return done;
}

void StreamEvent::wait() const {
  if (!event_) return;
#if COLO_TORCH_AT_LEAST(2, 0)
  event_->synchronize();
#else
  // LibTorch 1.13's c10::Event cannot block; its copies are short, so a yielding wait does.
  while (!event_->query()) std::this_thread::yield();
#endif
}

void StreamEvent::block_current_stream(const torch::Device& device) const {
  if (!event_ || !device.is_cuda()) return;
  event_->block(guard_impl(device).getStream(device));
}

CopyStream::CopyStream(const torch::Device& device) : device_(device) {
  if (device.is_cuda()) side_ = guard_impl(device).getStreamFromGlobalPool(device, /*isHighPriority=*/false);
}

StreamEvent CopyStream::copy(const torch::Tensor& dst, const torch::Tensor& src) {
  torch::NoGradGuard no_grad;
  if (!side_) {
    dst.copy_(src);
    return {};
  }
  auto impl = guard_impl(device_);
  const auto compute = impl.getStream(device_);
  const c10::Stream side = *side_;
  record_on(compute)->block(side);  // after what produced src (or last read dst)
  {
    c10::StreamGuard on_side(side);
    dst.copy_(src, /*non_blocking=*/true);
  }
  // The caching allocator must not hand the device memory to other work before the copy is done.
  for (const auto* t : {&dst, &src}) {
    if (t->is_cuda()) impl.recordDataPtrOnStream(t->storage().data_ptr(), side);
  }
  StreamEvent done;
  done.event_ = record_on(side);
  return done;
}

}  // namespace colo::compat
