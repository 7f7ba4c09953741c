// nvJPEG behind ImageFolder's decoder nvjpeg (nvjpeg_decoder.h). Compiled to nothing where the
// build has no nvJPEG.
#ifdef COLO_WITH_NVJPEG
#include "nvjpeg_decoder.h"

#include <ATen/core/CachingHostAllocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <fmt/format.h>
#include <nvjpeg.h>

#include <optional>
#include <stdexcept>
#include <unordered_map>
#include <utility>

namespace colo::data::detail {
namespace {

const char* status_name(nvjpegStatus_t status) {
  switch (status) {
    case NVJPEG_STATUS_SUCCESS: return "success";
    case NVJPEG_STATUS_NOT_INITIALIZED: return "not initialized";
    case NVJPEG_STATUS_INVALID_PARAMETER: return "invalid parameter";
    case NVJPEG_STATUS_BAD_JPEG: return "bad JPEG";
    case NVJPEG_STATUS_JPEG_NOT_SUPPORTED: return "JPEG not supported";
    case NVJPEG_STATUS_ALLOCATOR_FAILURE: return "allocator failure";
    case NVJPEG_STATUS_EXECUTION_FAILED: return "execution failed";
    case NVJPEG_STATUS_ARCH_MISMATCH: return "no such decoder on this GPU (arch mismatch)";
    case NVJPEG_STATUS_INTERNAL_ERROR: return "internal error";
    case NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED: return "implementation not supported";
    case NVJPEG_STATUS_INCOMPLETE_BITSTREAM: return "incomplete bitstream";
    default: return "unknown status";
  }
}

// Each image's pixels start on a 256-byte boundary of the storage (the hardware decoder's and
// the resize kernel's loads like aligned rows' starts).
constexpr int64_t kAlignment = 256;

int64_t aligned(int64_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

// nvJPEG's buffers from LibTorch's caching allocators rather than its default cudaMalloc/cudaFree
// and cudaHostAlloc/cudaFreeHost: a free of either waits for the whole device, so a buffer that
// nvJPEG grows while the training's kernels are queued would stall the loader for a step. The
// memory also shows in LibTorch's accounting, beside the training's. nvJPEG frees a buffer only
// once its last use is done (each decode() waits for its stream before its states are reused).
int device_malloc(void*, void** ptr, size_t size, cudaStream_t stream) {
  try {
    *ptr = c10::cuda::CUDACachingAllocator::raw_alloc_with_stream(size, stream);
    return 0;
  } catch (const std::exception&) {
    return 1;
  }
}

int device_free(void*, void* ptr, size_t, cudaStream_t) {
  c10::cuda::CUDACachingAllocator::raw_delete(ptr);
  return 0;
}

// Pinned blocks by address: LibTorch's host allocator hands out DataPtrs, nvJPEG keeps pointers.
struct PinnedBlocks {
  std::mutex mutex;
  std::unordered_map<void*, at::DataPtr> blocks;
};

int pinned_malloc(void* context, void** ptr, size_t size, cudaStream_t) {
  try {
    at::DataPtr block = at::getHostAllocator(at::kCUDA)->allocate(size);
    *ptr = block.get();
    auto* pinned = static_cast<PinnedBlocks*>(context);
    const std::lock_guard<std::mutex> lock(pinned->mutex);
    pinned->blocks.emplace(*ptr, std::move(block));
    return 0;
  } catch (const std::exception&) {
    return 1;
  }
}

int pinned_free(void* context, void* ptr, size_t, cudaStream_t) {
  auto* pinned = static_cast<PinnedBlocks*>(context);
  at::DataPtr block;
  {
    const std::lock_guard<std::mutex> lock(pinned->mutex);
    auto found = pinned->blocks.find(ptr);
    if (found == pinned->blocks.end()) return 1;
    block = std::move(found->second);
    pinned->blocks.erase(found);
  }
  return 0;  // `block` goes back to the host allocator here
}

}  // namespace

struct NvjpegDecoder::Handles {
  nvjpegHandle_t hardware = nullptr;  // null where the GPU has no JPEG engines
  nvjpegHandle_t cuda = nullptr;      // nvJPEG's default backend: CUDA kernels, Huffman on the CPU
  PinnedBlocks pinned;                // outlives the handles: declared before use, destroyed after
  nvjpegDevAllocatorV2_t device_allocator{device_malloc, device_free, nullptr};
  nvjpegPinnedAllocatorV2_t pinned_allocator{pinned_malloc, pinned_free, &pinned};
};

// One decode() call's states: nvJPEG's states are not thread-safe.
struct NvjpegDecoder::State {
  nvjpegJpegState_t hardware_state = nullptr;
  nvjpegJpegStream_t hardware_stream = nullptr;  // a file's parsed header, for the hardware decoder's check
  nvjpegJpegState_t cuda_state = nullptr;
  cudaEvent_t done = nullptr;  // recorded after the decoding, waited for without spinning
  ~State() {
    if (done != nullptr) cudaEventDestroy(done);
    if (hardware_stream != nullptr) nvjpegJpegStreamDestroy(hardware_stream);
    if (hardware_state != nullptr) nvjpegJpegStateDestroy(hardware_state);
    if (cuda_state != nullptr) nvjpegJpegStateDestroy(cuda_state);
  }
};

NvjpegDecoder::NvjpegDecoder(int device) : device_(device), handles_(std::make_unique<Handles>()) {
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  // Chroma upsampled by interpolation, as libjpeg-turbo's "fancy" upsampling does, where this
  // nvJPEG offers it (by replication otherwise: a larger difference from the CPU decoder at colour
  // edges).
  Handles& h = *handles_;
  auto create = [&h](nvjpegBackend_t backend, nvjpegHandle_t* handle, bool* interpolates) {
    nvjpegStatus_t status = nvjpegCreateExV2(backend, &h.device_allocator, &h.pinned_allocator,
                                             NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION, handle);
    *interpolates = status == NVJPEG_STATUS_SUCCESS;
    if (status != NVJPEG_STATUS_SUCCESS) {
      status = nvjpegCreateExV2(backend, &h.device_allocator, &h.pinned_allocator, NVJPEG_FLAGS_DEFAULT, handle);
    }
    return status;
  };
  std::string no_hardware;
  bool hardware_interpolates = false, cuda_interpolates = false;
  nvjpegStatus_t status = create(NVJPEG_BACKEND_HARDWARE, &handles_->hardware, &hardware_interpolates);
  unsigned engines = 0, cores = 0;
  if (status == NVJPEG_STATUS_SUCCESS) {
    if (nvjpegGetHardwareDecoderInfo(handles_->hardware, &engines, &cores) != NVJPEG_STATUS_SUCCESS) engines = 0;
  } else {
    handles_->hardware = nullptr;
    no_hardware = status_name(status);
  }
  status = create(NVJPEG_BACKEND_DEFAULT, &handles_->cuda, &cuda_interpolates);
  if (status != NVJPEG_STATUS_SUCCESS) {
    if (handles_->hardware != nullptr) nvjpegDestroy(handles_->hardware);
    throw std::runtime_error(fmt::format("nvJPEG could not be set up on cuda:{} (nvjpegCreateEx: {})", device,
                                         status_name(status)));
  }
  int major = 0, minor = 0;
  nvjpegGetProperty(MAJOR_VERSION, &major);
  nvjpegGetProperty(MINOR_VERSION, &minor);
  auto upsampling = [](bool interpolates) { return interpolates ? "interpolated chroma" : "replicated chroma"; };
  description_ = handles_->hardware != nullptr
                     ? fmt::format("nvJPEG {}.{}: the hardware JPEG decoder ({} engines, {}) for baseline files, "
                                   "nvJPEG's CUDA decoder ({}) for the rest",
                                   major, minor, engines, upsampling(hardware_interpolates), upsampling(cuda_interpolates))
                     : fmt::format("nvJPEG {}.{}: its CUDA decoder ({}; no hardware decoder: {})", major, minor,
                                   upsampling(cuda_interpolates), no_hardware);
}

NvjpegDecoder::~NvjpegDecoder() {
  idle_.clear();
  if (handles_->hardware != nullptr) nvjpegDestroy(handles_->hardware);
  if (handles_->cuda != nullptr) nvjpegDestroy(handles_->cuda);
}

std::unique_ptr<NvjpegDecoder::State> NvjpegDecoder::acquire() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!idle_.empty()) {
      auto state = std::move(idle_.back());
      idle_.pop_back();
      return state;
    }
  }
  auto state = std::make_unique<State>();
  auto check = [](nvjpegStatus_t status, const char* what) {
    if (status != NVJPEG_STATUS_SUCCESS) throw std::runtime_error(fmt::format("nvJPEG: {}: {}", what, status_name(status)));
  };
  if (handles_->hardware != nullptr) {
    check(nvjpegJpegStateCreate(handles_->hardware, &state->hardware_state), "nvjpegJpegStateCreate (hardware)");
    check(nvjpegJpegStreamCreate(handles_->hardware, &state->hardware_stream), "nvjpegJpegStreamCreate");
  }
  check(nvjpegJpegStateCreate(handles_->cuda, &state->cuda_state), "nvjpegJpegStateCreate");
  if (cudaEventCreateWithFlags(&state->done, cudaEventBlockingSync | cudaEventDisableTiming) != cudaSuccess) {
    throw std::runtime_error("nvJPEG: cudaEventCreateWithFlags failed");
  }
  return state;
}

void NvjpegDecoder::release(std::unique_ptr<State> state) {
  std::lock_guard<std::mutex> lock(mutex_);
  idle_.push_back(std::move(state));
}

std::vector<NvjpegOutput> NvjpegDecoder::decode(const std::vector<NvjpegInput>& inputs, cudaStream_t stream,
                                                torch::Tensor* storage) {
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
  std::unique_ptr<State> state = acquire();
  std::vector<NvjpegOutput> outputs(inputs.size());
  std::vector<size_t> hardware, software;  // which inputs go to the engines, which to the CUDA decoder
  int64_t total = 0;
  std::optional<DecodePhases::Span> span(std::in_place, phases_, DecodePhase::kParse);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const NvjpegInput& in = inputs[i];
    NvjpegOutput& out = outputs[i];
    int components = 0;
    nvjpegChromaSubsampling_t subsampling = NVJPEG_CSS_UNKNOWN;
    int widths[NVJPEG_MAX_COMPONENT] = {};
    int heights[NVJPEG_MAX_COMPONENT] = {};
    const nvjpegStatus_t status =
        nvjpegGetImageInfo(handles_->cuda, in.data, in.size, &components, &subsampling, widths, heights);
    if (status != NVJPEG_STATUS_SUCCESS) {
      out.error = fmt::format("nvjpegGetImageInfo: {}", status_name(status));
      continue;
    }
    // CMYK and YCCK: libjpeg-turbo's conversion (PIL's) is the one colo gives, on the CPU.
    if (components != 1 && components != 3) {
      out.error = fmt::format("{} colour components", components);
      continue;
    }
    out.ok = true;
    out.height = heights[0];
    out.width = widths[0];
    out.offset = total;
    total += aligned(out.height * out.width * 3);
    int unsupported = 1;
    if (handles_->hardware != nullptr &&
        nvjpegJpegStreamParseHeader(handles_->hardware, in.data, in.size, state->hardware_stream) ==
            NVJPEG_STATUS_SUCCESS &&
        nvjpegDecodeBatchedSupported(handles_->hardware, state->hardware_stream, &unsupported) ==
            NVJPEG_STATUS_SUCCESS &&
        unsupported == 0) {
      hardware.push_back(i);
    } else {
      software.push_back(i);
    }
  }
  span.emplace(phases_, DecodePhase::kSubmit);
  *storage = torch::empty({std::max<int64_t>(total, 1)},
                          torch::TensorOptions().dtype(torch::kUInt8).device(torch::kCUDA, device_));
  auto* base = storage->data_ptr<uint8_t>();
  auto destination = [&](size_t i) {
    nvjpegImage_t image{};
    image.channel[0] = base + outputs[i].offset;
    image.pitch[0] = static_cast<size_t>(outputs[i].width * 3);
    return image;
  };
  if (!hardware.empty()) {
    std::vector<const unsigned char*> data;
    std::vector<size_t> lengths;
    std::vector<nvjpegImage_t> images;
    for (const size_t i : hardware) {
      data.push_back(inputs[i].data);
      lengths.push_back(inputs[i].size);
      images.push_back(destination(i));
    }
    nvjpegStatus_t status = nvjpegDecodeBatchedInitialize(handles_->hardware, state->hardware_state,
                                                          static_cast<int>(hardware.size()), 1, NVJPEG_OUTPUT_RGBI);
    if (status == NVJPEG_STATUS_SUCCESS) {
      status = nvjpegDecodeBatched(handles_->hardware, state->hardware_state, data.data(), lengths.data(),
                                   images.data(), stream);
    }
    if (status == NVJPEG_STATUS_SUCCESS) {
      for (const size_t i : hardware) outputs[i].hardware = true;
    } else {
      // The batch as a whole failed (one bad file fails it): each file again on the CUDA decoder.
      software.insert(software.end(), hardware.begin(), hardware.end());
    }
  }
  for (const size_t i : software) {
    nvjpegImage_t image = destination(i);
    const nvjpegStatus_t status = nvjpegDecode(handles_->cuda, state->cuda_state, inputs[i].data, inputs[i].size,
                                               NVJPEG_OUTPUT_RGBI, &image, stream);
    if (status != NVJPEG_STATUS_SUCCESS) {
      outputs[i].ok = false;
      outputs[i].error = fmt::format("nvjpegDecode: {}", status_name(status));
    }
  }
  // The states' buffers are in use until the stream has decoded: wait before another call may take
  // them (and before the caller may free the files' bytes).
  span.emplace(phases_, DecodePhase::kDecodeWait);
  if (cudaEventRecord(state->done, stream) != cudaSuccess || cudaEventSynchronize(state->done) != cudaSuccess) {
    throw std::runtime_error(fmt::format("nvJPEG: decoding on cuda:{} failed: {}", device_,
                                         cudaGetErrorString(cudaGetLastError())));
  }
  release(std::move(state));
  return outputs;
}

}  // namespace colo::data::detail
#endif
