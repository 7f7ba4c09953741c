// ImageFolder's decoder option (issue 38): the names, the choice between nvJPEG and the CPU, and
// in builds with nvJPEG (COLO_WITH_NVJPEG) the batch made on the GPU: the worker thread reads the
// files and draws each crop box and flip on the CPU from the sample's seed (detail::plan_crop, as
// the CPU decoder does), nvJPEG decodes the JPEGs on the device, and one kernel launch resamples
// every image into the batch with the CPU decoder's filter taps. PNGs, CMYK JPEGs and whatever
// nvJPEG refuses go through the CPU decoder's own read_slot into their places.
#include <colo/data/cuda_work_queues.h>
#include <colo/data/dataset_error.h>
#include <colo/data/image_codec.h>
#include <colo/data/image_folder.h>
#include <fmt/format.h>
#include <torch/types.h>

#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>

#include "image_folder_crop.h"

#ifdef COLO_WITH_NVJPEG
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "gpu_resample.h"
#include "nvjpeg_decoder.h"
#endif

namespace colo::data {

ImageDecoder parse_image_decoder(const std::string& name) {
  if (name == "cpu") return ImageDecoder::kCpu;
  if (name == "nvjpeg") return ImageDecoder::kNvjpeg;
  if (name == "auto") return ImageDecoder::kAuto;
  throw std::invalid_argument(fmt::format(
      "unknown image decoder '{}': cpu (libjpeg-turbo in the loader's threads), nvjpeg (nvJPEG on the loader's GPU; "
      "an error where it cannot run) or auto (nvjpeg where it can run, else cpu)",
      name));
}

const char* to_string(ImageDecoder decoder) {
  switch (decoder) {
    case ImageDecoder::kCpu: return "cpu";
    case ImageDecoder::kNvjpeg: return "nvjpeg";
    case ImageDecoder::kAuto: return "auto";
  }
  return "?";
}

bool nvjpeg_compiled() {
#ifdef COLO_WITH_NVJPEG
  return true;
#else
  return false;
#endif
}

#ifdef COLO_WITH_NVJPEG
struct ImageFolder::GpuDecoding {
  explicit GpuDecoding(int device) : decoder(device) {}
  detail::NvjpegDecoder decoder;
};
#else
struct ImageFolder::GpuDecoding {};
#endif

struct ImageFolder::GpuDecoders {
  std::mutex mutex;
  std::map<int, std::shared_ptr<GpuDecoding>> ready;  // by device index
  std::map<int, std::string> failed;                  // why nvJPEG cannot run there
};

std::shared_ptr<ImageFolder::GpuDecoders> ImageFolder::make_gpu_decoders() { return std::make_shared<GpuDecoders>(); }

std::shared_ptr<ImageFolder::GpuDecoding> ImageFolder::gpu_decoding(const torch::Device& device,
                                                                    std::string* why_not) const {
  if (!nvjpeg_compiled()) {
    *why_not = "this build of colo has no nvJPEG";
    return nullptr;
  }
  if (!device.is_cuda()) {
    *why_not = fmt::format("the loader delivers to {}, and nvJPEG decodes on a CUDA device", device.str());
    return nullptr;
  }
#ifdef COLO_WITH_NVJPEG
  const int index = device.has_index() ? device.index() : c10::cuda::current_device();
  std::lock_guard<std::mutex> lock(gpu_->mutex);
  if (auto found = gpu_->ready.find(index); found != gpu_->ready.end()) return found->second;
  if (auto failed = gpu_->failed.find(index); failed != gpu_->failed.end()) {
    *why_not = failed->second;
    return nullptr;
  }
  try {
    auto decoding = std::make_shared<GpuDecoding>(index);
    gpu_->ready.emplace(index, decoding);
    return decoding;
  } catch (const std::exception& error) {
    gpu_->failed.emplace(index, error.what());
    *why_not = error.what();
    return nullptr;
  }
#else
  return nullptr;
#endif
}

std::string ImageFolder::device_problem(const torch::Device& device) const {
  if (options_.decoder() != ImageDecoder::kNvjpeg) return {};
  std::string why_not;
  if (gpu_decoding(device, &why_not)) return {};
  return fmt::format("{}: decoder nvjpeg cannot run: {}; use decoder auto (nvJPEG where it can run, else the CPU) or "
                     "cpu",
                     name(), why_not);
}

std::string ImageFolder::decoder_in_use(const torch::Device& device) const {
  if (options_.decoder() == ImageDecoder::kCpu) return "JPEGs decoded on the CPU by libjpeg-turbo (decoder cpu)";
  std::string why_not;
  const auto gpu = gpu_decoding(device, &why_not);
  if (!gpu) {
    return fmt::format("JPEGs decoded on the CPU by libjpeg-turbo: decoder {}, but {}", to_string(options_.decoder()),
                       why_not);
  }
#ifdef COLO_WITH_NVJPEG
  const WorkQueuesPlan queues = current_work_queues();
  return fmt::format("JPEGs decoded on {} by {} (decoder {}; PNG and CMYK files on the CPU; {})", device.str(),
                     gpu->decoder.description(), to_string(options_.decoder()),
                     queues.advice.empty() ? fmt::format("{} CUDA work queues", queues.queues)
                                           : "WARNING: " + queues.advice);
#else
  return {};
#endif
}

std::string ImageFolder::gpu_decode_phases(const torch::Device& device) const {
#ifdef COLO_WITH_NVJPEG
  if (options_.decoder() == ImageDecoder::kCpu || !device.is_cuda()) return {};
  std::string why_not;
  const auto gpu = gpu_decoding(device, &why_not);
  return gpu ? gpu->decoder.phases().summary() : std::string();
#else
  (void)device;
  return {};
#endif
}

std::optional<Batch> ImageFolder::get_device_batch(const std::vector<int64_t>& indices,
                                                   const std::vector<uint64_t>* sample_seeds,
                                                   const torch::Device& device) const {
  if (options_.decoder() == ImageDecoder::kCpu || !device.is_cuda()) return std::nullopt;
  std::string why_not;
  const auto gpu = gpu_decoding(device, &why_not);
  if (!gpu) {
    // The DataLoader checks device_problem() first; this is for a caller that did not.
    if (options_.decoder() == ImageDecoder::kNvjpeg) throw std::runtime_error(device_problem(device));
    return std::nullopt;
  }
  if (sample_seeds != nullptr && sample_seeds->size() != indices.size()) {
    throw std::invalid_argument(
        fmt::format("{}: {} indices but {} sample seeds", name(), indices.size(), sample_seeds->size()));
  }
  return gpu_batch(*gpu, indices, sample_seeds, device);
}

#ifdef COLO_WITH_NVJPEG
Batch ImageFolder::gpu_batch(GpuDecoding& gpu, const std::vector<int64_t>& indices,
                             const std::vector<uint64_t>* seeds, const torch::Device& device) const {
  const c10::cuda::CUDAGuard guard(device);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  const auto count = static_cast<int64_t>(indices.size());
  const int64_t size = options_.image_size();
  const int64_t n = this->size();
  const bool augment = seeds != nullptr;

  // Each slot's file, its header and its box and flip, read on the CPU as read() does.
  struct Slot {
    int64_t sample = 0;
    std::vector<uint8_t> bytes;
    ImageInfo info;
    detail::CropPlan plan;
    bool on_gpu = false;
  };
  detail::DecodePhases& phases = gpu.decoder.phases();
  phases.add_images(count);
  std::optional<detail::DecodePhases::Span> span(std::in_place, phases, detail::DecodePhase::kRead);
  std::vector<Slot> slots(static_cast<size_t>(count));
  std::vector<detail::NvjpegInput> inputs;
  std::vector<size_t> input_slot;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t index = indices[static_cast<size_t>(i)];
    if (index < 0 || index >= n) {
      throw std::out_of_range(fmt::format("{}: sample index {} outside [0, {})", name(), index, n));
    }
    Slot& slot = slots[static_cast<size_t>(i)];
    for (int64_t attempt = 0;; ++attempt) {
      slot.sample = (index + attempt) % n;
      try {
        slot.bytes = read_binary_file(samples_[static_cast<size_t>(slot.sample)].path);
        slot.info = read_image_info(slot.bytes.data(), slot.bytes.size(), samples_[static_cast<size_t>(slot.sample)].path);
        break;
      } catch (const DatasetError& error) {
        skip_or_throw(error, attempt);
      }
    }
    const uint64_t seed = augment ? (*seeds)[static_cast<size_t>(i)] : 0;
    slot.plan = detail::plan_crop(options_, slot.info.height, slot.info.width, augment, seed);
    slot.on_gpu = slot.info.format == ImageFormat::kJpeg;
    if (slot.on_gpu) {
      inputs.push_back({slot.bytes.data(), slot.bytes.size()});
      input_slot.push_back(static_cast<size_t>(i));
    }
  }

  auto images = torch::empty({count, 3, size, size}, torch::TensorOptions().dtype(torch::kFloat).device(device));
  auto labels = torch::empty({count}, torch::kLong);
  torch::Tensor storage;
  span.reset();  // decode() times its own phases
  const std::vector<detail::NvjpegOutput> decoded = gpu.decoder.decode(inputs, stream, &storage);
  span.emplace(phases, detail::DecodePhase::kResample);

  // The decoded images resampled into their places, in one launch.
  std::vector<detail::GpuResampleImage> resample;
  for (size_t k = 0; k < decoded.size(); ++k) {
    Slot& slot = slots[input_slot[k]];
    const detail::NvjpegOutput& out = decoded[k];
    if (!out.ok || out.height != slot.info.height || out.width != slot.info.width) {
      slot.on_gpu = false;  // decoded on the CPU below
      continue;
    }
    detail::GpuResampleImage image;
    image.pixels = storage.data_ptr<uint8_t>() + out.offset;
    image.height = out.height;
    image.width = out.width;
    image.box = slot.plan.box;
    image.bounds = detail::filter_bounds(slot.plan.box, out.height, out.width, augment);
    image.flip = slot.plan.flip;
    image.out = images.data_ptr<float>() + static_cast<int64_t>(input_slot[k]) * 3 * size * size;
    resample.push_back(image);
  }
  const std::vector<torch::Tensor> staging = detail::launch_resample(resample, size, size, device, stream);

  // The rest on the CPU, each into its place, exactly as the CPU decoder makes it.
  int64_t* label_data = labels.data_ptr<int64_t>();
  for (int64_t i = 0; i < count; ++i) {
    Slot& slot = slots[static_cast<size_t>(i)];
    if (!slot.on_gpu) {
      auto pixels = torch::empty({3, size, size}, torch::kFloat);
      slot.sample = read_slot(slot.sample, augment, augment ? (*seeds)[static_cast<size_t>(i)] : 0,
                              pixels.data_ptr<float>());
      images[i].copy_(pixels);
    }
    label_data[i] = samples_[static_cast<size_t>(slot.sample)].label;
  }
  span.emplace(phases, detail::DecodePhase::kFinish);
  // Wait (yielding the core) until the resize is done: the pinned staging goes back to LibTorch's
  // caching host allocator when this returns, which would hand it out again at once.
  detail::wait_for(stream, "ImageFolder: decoding on the GPU failed");
  return {images, labels};
}
#else
Batch ImageFolder::gpu_batch(GpuDecoding&, const std::vector<int64_t>&, const std::vector<uint64_t>*,
                             const torch::Device&) const {
  throw std::logic_error("ImageFolder::gpu_batch: this build has no nvJPEG");
}
#endif

}  // namespace colo::data
