// gpu_image_ops.h: ImageFolder's GPU decoding in parts, on the current stream of the device, for
// tests and tools.
#include <colo/data/gpu_image_ops.h>
#include <colo/data/image_folder.h>
#include <fmt/format.h>

#include <stdexcept>

#ifdef COLO_WITH_NVJPEG
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "gpu_resample.h"
#include "nvjpeg_decoder.h"
#endif

namespace colo::data {

#ifdef COLO_WITH_NVJPEG
std::vector<GpuDecodedJpeg> nvjpeg_decode(const std::vector<std::vector<uint8_t>>& files, const torch::Device& device) {
  if (!device.is_cuda()) throw std::runtime_error(fmt::format("nvjpeg_decode: {} is no CUDA device", device.str()));
  const c10::cuda::CUDAGuard guard(device);
  const int index = c10::cuda::current_device();
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(index).stream();
  detail::NvjpegDecoder decoder(index);
  std::vector<detail::NvjpegInput> inputs;
  for (const auto& file : files) inputs.push_back({file.data(), file.size()});
  torch::Tensor storage;
  const auto outputs = decoder.decode(inputs, stream, &storage);
  std::vector<GpuDecodedJpeg> decoded;
  for (const auto& out : outputs) {
    GpuDecodedJpeg image;
    image.hardware = out.hardware;
    image.error = out.error;
    if (out.ok) {
      image.pixels = storage.narrow(0, out.offset, out.height * out.width * 3).view({out.height, out.width, 3}).clone();
    }
    decoded.push_back(std::move(image));
  }
  return decoded;
}

torch::Tensor resample_rgb_on_device(const torch::Tensor& pixels, const CropBox& box, const PixelBounds& bounds,
                                     int64_t out_height, int64_t out_width, bool flip) {
  if (!pixels.is_cuda() || pixels.scalar_type() != torch::kUInt8 || pixels.dim() != 3 || pixels.size(2) != 3) {
    throw std::invalid_argument("resample_rgb_on_device: expected uint8 [height, width, 3] pixels on a CUDA device");
  }
  const c10::cuda::CUDAGuard guard(pixels.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(pixels.device().index()).stream();
  const torch::Tensor source = pixels.contiguous();
  auto out = torch::empty({3, out_height, out_width}, pixels.options().dtype(torch::kFloat));
  detail::GpuResampleImage image;
  image.pixels = source.data_ptr<uint8_t>();
  image.height = source.size(0);
  image.width = source.size(1);
  image.box = box;
  image.bounds = bounds;
  image.flip = flip;
  image.out = out.data_ptr<float>();
  const auto staging = detail::launch_resample({image}, out_height, out_width, pixels.device(), stream);
  detail::wait_for(stream, "resample_rgb_on_device");
  return out;
}
#else
std::vector<GpuDecodedJpeg> nvjpeg_decode(const std::vector<std::vector<uint8_t>>&, const torch::Device&) {
  throw std::runtime_error("nvjpeg_decode: this build of colo has no nvJPEG");
}

torch::Tensor resample_rgb_on_device(const torch::Tensor&, const CropBox&, const PixelBounds&, int64_t, int64_t, bool) {
  throw std::runtime_error("resample_rgb_on_device: this build of colo has no nvJPEG");
}
#endif

}  // namespace colo::data
