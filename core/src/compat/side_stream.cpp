#include <colo/compat/side_stream.h>

#ifdef COLO_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace colo::compat {

#ifdef COLO_WITH_CUDA

StreamMark StreamMark::here(const torch::Device& device) {
  StreamMark mark;
  if (!device.is_cuda()) return mark;
  auto event = std::make_shared<at::cuda::CUDAEvent>();
  event->record(c10::cuda::getCurrentCUDAStream(device.index()));
  mark.event_ = std::move(event);
  return mark;
}

void StreamMark::make_current_stream_wait() const {
  if (!event_) return;
  auto& event = *static_cast<at::cuda::CUDAEvent*>(event_.get());
  event.block(c10::cuda::getCurrentCUDAStream(event.device_index()));
}

struct SideStreamScope::Streams {
  c10::cuda::CUDAStream previous;
  c10::cuda::CUDAStream side;
};

SideStreamScope::SideStreamScope(const torch::Device& device, const StreamMark& after) {
  if (!device.is_cuda()) return;
  const auto index = device.index() >= 0 ? device.index() : c10::cuda::current_device();
  streams_.reset(new Streams{c10::cuda::getCurrentCUDAStream(index), c10::cuda::getStreamFromPool(false, index)});
  c10::cuda::setCurrentCUDAStream(streams_->side);
  after.make_current_stream_wait();
}

SideStreamScope::~SideStreamScope() {
  if (!streams_) return;
  at::cuda::CUDAEvent done;
  done.record(streams_->side);
  done.block(streams_->previous);
  c10::cuda::setCurrentCUDAStream(streams_->previous);
}

#else  // the CPU build: nothing is asynchronous

StreamMark StreamMark::here(const torch::Device& /*device*/) { return {}; }
void StreamMark::make_current_stream_wait() const {}
struct SideStreamScope::Streams {};
SideStreamScope::SideStreamScope(const torch::Device& /*device*/, const StreamMark& /*after*/) {}
SideStreamScope::~SideStreamScope() = default;

#endif

}  // namespace colo::compat
