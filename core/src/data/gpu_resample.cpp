#ifdef COLO_WITH_NVJPEG
#include "gpu_resample.h"

#include <fmt/format.h>

#include <cstring>
#include <stdexcept>

#include "../kernels/image_resample.h"
#include "resample_taps.h"

namespace colo::data::detail {
namespace {

// Appends values to a staging buffer at a 16-byte aligned offset; returns the offset.
template <typename T>
int64_t append(std::vector<uint8_t>& buffer, const T* data, size_t count) {
  const int64_t offset = (static_cast<int64_t>(buffer.size()) + 15) / 16 * 16;
  buffer.resize(static_cast<size_t>(offset) + count * sizeof(T));
  std::memcpy(buffer.data() + offset, data, count * sizeof(T));
  return offset;
}

int64_t append_indices(std::vector<uint8_t>& buffer, const std::vector<int64_t>& values) {
  const std::vector<int32_t> narrow(values.begin(), values.end());
  return append(buffer, narrow.data(), narrow.size());
}

}  // namespace

std::vector<torch::Tensor> launch_resample(const std::vector<GpuResampleImage>& images, int64_t out_height,
                                           int64_t out_width, const torch::Device& device, cudaStream_t stream) {
  if (images.empty()) return {};
  // The taps of every image, then the jobs pointing at them, in one buffer: one copy, one launch.
  struct Offsets {
    int64_t row_first, row_count, row_weights, column_first, column_count, column_weights;
  };
  std::vector<uint8_t> taps_bytes;
  std::vector<Offsets> offsets;
  std::vector<kernels::ResampleJob> jobs;
  for (const GpuResampleImage& image : images) {
    const ResampleTaps taps = resample_taps(image.height, image.width, image.box, image.bounds, out_height, out_width);
    Offsets o{};
    o.row_first = append_indices(taps_bytes, taps.rows.first);
    o.row_count = append_indices(taps_bytes, taps.rows.count);
    o.row_weights = append(taps_bytes, taps.rows.weights.data(), taps.rows.weights.size());
    o.column_first = append_indices(taps_bytes, taps.columns.first);
    o.column_count = append_indices(taps_bytes, taps.columns.count);
    o.column_weights = append(taps_bytes, taps.columns.weights.data(), taps.columns.weights.size());
    offsets.push_back(o);
    kernels::ResampleJob job{};
    job.pixels = image.pixels;
    job.pitch = image.width * 3;
    job.row_max_taps = static_cast<int32_t>(taps.rows.max_taps);
    job.column_max_taps = static_cast<int32_t>(taps.columns.max_taps);
    job.flip = image.flip ? 1 : 0;
    job.out = image.out;
    jobs.push_back(job);
  }
  const auto jobs_bytes = static_cast<int64_t>(jobs.size() * sizeof(kernels::ResampleJob));
  const int64_t taps_at = (jobs_bytes + 255) / 256 * 256;
  const int64_t total = taps_at + static_cast<int64_t>(taps_bytes.size());
  auto host = torch::empty({total}, torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(true));
  auto on_device = torch::empty({total}, torch::TensorOptions().dtype(torch::kUInt8).device(device));
  const uint8_t* device_taps = on_device.data_ptr<uint8_t>() + taps_at;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const Offsets& o = offsets[j];
    jobs[j].row_first = reinterpret_cast<const int32_t*>(device_taps + o.row_first);
    jobs[j].row_count = reinterpret_cast<const int32_t*>(device_taps + o.row_count);
    jobs[j].row_weights = reinterpret_cast<const float*>(device_taps + o.row_weights);
    jobs[j].column_first = reinterpret_cast<const int32_t*>(device_taps + o.column_first);
    jobs[j].column_count = reinterpret_cast<const int32_t*>(device_taps + o.column_count);
    jobs[j].column_weights = reinterpret_cast<const float*>(device_taps + o.column_weights);
  }
  std::memcpy(host.data_ptr<uint8_t>(), jobs.data(), static_cast<size_t>(jobs_bytes));
  std::memcpy(host.data_ptr<uint8_t>() + taps_at, taps_bytes.data(), taps_bytes.size());
  cudaError_t status =
      cudaMemcpyAsync(on_device.data_ptr(), host.data_ptr(), static_cast<size_t>(total), cudaMemcpyHostToDevice, stream);
  if (status == cudaSuccess) {
    status = kernels::resample_rgb_batch(reinterpret_cast<const kernels::ResampleJob*>(on_device.data_ptr()),
                                         static_cast<int>(jobs.size()), static_cast<int>(out_height),
                                         static_cast<int>(out_width), stream);
  }
  if (status != cudaSuccess) {
    throw std::runtime_error(fmt::format("resizing images on {} failed: {}{}", device.str(), cudaGetErrorString(status),
                                         status == cudaErrorNoKernelImageForDevice
                                             ? " (colo was compiled for other GPU architectures: rebuild with "
                                               "-DCOLO_CUDA_ARCHITECTURES=<this GPU's>)"
                                             : ""));
  }
  return {host, on_device};
}

void wait_for(cudaStream_t stream, const char* what) {
  cudaEvent_t done = nullptr;
  cudaError_t status = cudaEventCreateWithFlags(&done, cudaEventBlockingSync | cudaEventDisableTiming);
  if (status == cudaSuccess) status = cudaEventRecord(done, stream);
  if (status == cudaSuccess) status = cudaEventSynchronize(done);
  if (done != nullptr) cudaEventDestroy(done);
  if (status != cudaSuccess) throw std::runtime_error(fmt::format("{}: {}", what, cudaGetErrorString(status)));
}

}  // namespace colo::data::detail
#endif
