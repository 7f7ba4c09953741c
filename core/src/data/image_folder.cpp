#include <colo/data/cuda_work_queues.h>
#include <colo/data/dataset_error.h>
#include <colo/data/image_codec.h>
#include <colo/data/image_folder.h>
#include <fmt/format.h>
#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <stdexcept>

#include "image_folder_crop.h"
#include "image_folder_scan.h"
#include "seed_mix.h"

namespace colo::data {
namespace {

// Distinct streams for the crop and the flip drawn from one sample seed (the DataLoader's own
// augmentation uses the seed itself).
constexpr uint64_t kCropStream = 0x63726f70ULL;
constexpr uint64_t kFlipStream = 0x666c6970ULL;

// How many "path: reason" lines skipped_files() keeps.
constexpr size_t kSkipLogLines = 10;

std::string validate(const ImageFolderOptions& o) {
  std::string errors;
  auto add = [&errors](const std::string& error) { errors += (errors.empty() ? "" : "; ") + error; };
  if (o.image_size() < 1) add(fmt::format("image_size must be positive, got {}", o.image_size()));
  if (!(o.crop_fraction() > 0 && o.crop_fraction() <= 1)) {
    add(fmt::format("crop_fraction must be in (0, 1], got {}", o.crop_fraction()));
  }
  const auto& c = o.random_resized_crop();
  if (!(c.min_scale > 0 && c.min_scale <= c.max_scale && c.max_scale <= 1)) {
    add(fmt::format("random_resized_crop scale must satisfy 0 < min <= max <= 1, got [{}, {}]", c.min_scale,
                    c.max_scale));
  }
  if (!(c.min_ratio > 0 && c.min_ratio <= c.max_ratio)) {
    add(fmt::format("random_resized_crop ratio must satisfy 0 < min <= max, got [{}, {}]", c.min_ratio,
                    c.max_ratio));
  }
  if (o.decoder() == ImageDecoder::kNvjpeg && !nvjpeg_compiled()) {
    add("decoder nvjpeg: this build of colo has no nvJPEG (a CPU build, or a CUDA build that found no nvjpeg.h and "
        "libnvjpeg when configured: install the CUDA toolkit's nvJPEG or PyPI's nvidia-nvjpeg, or set "
        "COLO_NVJPEG_ROOT, and configure again); decoder auto falls back to the CPU decoder");
  }
  const auto& n = o.normalization();
  if (n.mean.size() != 3 || n.std.size() != 3 ||
      !std::all_of(n.std.begin(), n.std.end(), [](double s) { return s > 0; })) {
    add("normalization needs 3 means and 3 positive stds (RGB)");
  }
  return errors;
}

}  // namespace

struct ImageFolder::SkipLog {
  std::mutex mutex;
  std::vector<std::string> lines;
};

ImageFolder::ImageFolder(std::string root, ImageFolderOptions options)
    : root_(std::move(root)),
      options_(std::move(options)),
      skip_log_(std::make_unique<SkipLog>()),
      gpu_(make_gpu_decoders()) {
  if (const auto errors = validate(options_); !errors.empty()) {
    throw std::invalid_argument(fmt::format("ImageFolder {}: {}", root_, errors));
  }
  // nvJPEG stalls behind training without its own hardware queues: ask for them while a CUDA
  // context can still get them (a no-op once it exists; decoder_in_use() then says so).
  if (options_.decoder() != ImageDecoder::kCpu) widen_work_queues_for_nvjpeg();
  auto listing = detail::scan_image_folder(root_, options_.skip_unreadable());
  classes_ = std::move(listing.classes);
  scan_notes_ = std::move(listing.notes);
  samples_.reserve(listing.paths.size());
  for (size_t i = 0; i < listing.paths.size(); ++i) samples_.push_back({std::move(listing.paths[i]), listing.labels[i]});
}

ImageFolder::~ImageFolder() = default;

std::string ImageFolder::name() const { return fmt::format("image folder {}", root_); }

const std::string& ImageFolder::path(int64_t index) const { return samples_.at(static_cast<size_t>(index)).path; }

int64_t ImageFolder::label(int64_t index) const { return samples_.at(static_cast<size_t>(index)).label; }

std::vector<std::string> ImageFolder::skipped_files() const {
  std::lock_guard<std::mutex> lock(skip_log_->mutex);
  return skip_log_->lines;
}

namespace detail {

CropPlan plan_crop(const ImageFolderOptions& options, int64_t height, int64_t width, bool augment, uint64_t seed) {
  CropPlan plan;
  if (augment) {
    plan.box = random_resized_crop_box(height, width, options.random_resized_crop(), combine_seeds(seed, kCropStream));
    plan.flip = options.horizontal_flip() && (combine_seeds(seed, kFlipStream) & 1) != 0;
  } else {
    const int64_t size = options.image_size();
    const auto resize = static_cast<int64_t>(std::floor(static_cast<double>(size) / options.crop_fraction()));
    plan.box = resize_center_crop_box(height, width, resize, size);
  }
  return plan;
}

PixelBounds filter_bounds(const CropBox& box, int64_t height, int64_t width, bool augment) {
  if (!augment) return {0, 0, height, width};
  return {static_cast<int64_t>(std::floor(box.top + 1e-6)), static_cast<int64_t>(std::floor(box.left + 1e-6)),
          static_cast<int64_t>(std::ceil(box.top + box.height - 1e-6)),
          static_cast<int64_t>(std::ceil(box.left + box.width - 1e-6))};
}

}  // namespace detail

void ImageFolder::read(int64_t index, bool augment, uint64_t seed, float* out) const {
  const Sample& sample = samples_[static_cast<size_t>(index)];
  const std::vector<uint8_t> bytes = read_binary_file(sample.path);
  const ImageInfo info = read_image_info(bytes.data(), bytes.size(), sample.path);
  const int64_t size = options_.image_size();
  const auto [box, flip] = detail::plan_crop(options_, info.height, info.width, augment, seed);
  // A training crop is cut out and then resized (the filter stays inside it); evaluation resizes
  // the whole image and then cuts (the filter reads a little around the box): decode the box, or
  // the box and the filter's reach around it.
  const double reach_y = augment ? 0 : std::max(box.height / static_cast<double>(size), 1.0) + 1;
  const double reach_x = augment ? 0 : std::max(box.width / static_cast<double>(size), 1.0) + 1;
  DecodeRegion region;
  region.top = static_cast<int64_t>(std::floor(box.top - reach_y));
  region.left = static_cast<int64_t>(std::floor(box.left - reach_x));
  region.height = static_cast<int64_t>(std::ceil(box.top + box.height + reach_y)) - region.top;
  region.width = static_cast<int64_t>(std::ceil(box.left + box.width + reach_x)) - region.left;
  region.min_scale = std::max(static_cast<double>(size) / box.height, static_cast<double>(size) / box.width);
  if (region.top < 0) region.height += region.top, region.top = 0;
  if (region.left < 0) region.width += region.left, region.left = 0;
  const DecodedImage image = decode_image(bytes.data(), bytes.size(), sample.path, region);

  // The box in the decoded pixels' coordinates.
  const CropBox local{(box.top - static_cast<double>(image.top)) * image.scale,
                      (box.left - static_cast<double>(image.left)) * image.scale, box.height * image.scale,
                      box.width * image.scale};
  const PixelBounds bounds = detail::filter_bounds(local, image.height, image.width, augment);
  resample_rgb(image.pixels.data(), image.height, image.width, local, bounds, size, size, flip, out);
}

void ImageFolder::skip_or_throw(const DatasetError& error, int64_t attempt) const {
  if (!options_.skip_unreadable()) throw error;
  skipped_.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(skip_log_->mutex);
    if (skip_log_->lines.size() < kSkipLogLines) skip_log_->lines.emplace_back(error.what());
  }
  if (attempt + 1 >= size()) throw DatasetError(fmt::format("{}: no image can be read", root_));
}

int64_t ImageFolder::read_slot(int64_t index, bool augment, uint64_t seed, float* out) const {
  // With skip_unreadable, an unreadable image gives its place to the next readable one.
  for (int64_t attempt = 0;; ++attempt) {
    const int64_t candidate = (index + attempt) % size();
    try {
      read(candidate, augment, seed, out);
      return candidate;
    } catch (const DatasetError& error) {
      skip_or_throw(error, attempt);
    }
  }
}

Batch ImageFolder::read_batch(const std::vector<int64_t>& indices, const std::vector<uint64_t>* seeds) const {
  const auto count = static_cast<int64_t>(indices.size());
  const int64_t size = options_.image_size();
  const int64_t n = this->size();
  auto images = torch::empty({count, 3, size, size}, torch::kFloat);
  auto labels = torch::empty({count}, torch::kLong);
  float* pixels = images.data_ptr<float>();
  int64_t* label_data = labels.data_ptr<int64_t>();
  for (int64_t i = 0; i < count; ++i) {
    const int64_t index = indices[static_cast<size_t>(i)];
    if (index < 0 || index >= n) {
      throw std::out_of_range(fmt::format("{}: sample index {} outside [0, {})", name(), index, n));
    }
    const uint64_t seed = seeds != nullptr ? (*seeds)[static_cast<size_t>(i)] : 0;
    const int64_t sample = read_slot(index, seeds != nullptr, seed, pixels + i * 3 * size * size);
    label_data[i] = samples_[static_cast<size_t>(sample)].label;
  }
  return {images, labels};
}

Batch ImageFolder::get_batch(const std::vector<int64_t>& indices) const { return read_batch(indices, nullptr); }

Batch ImageFolder::get_augmented_batch(const std::vector<int64_t>& indices,
                                       const std::vector<uint64_t>& sample_seeds) const {
  if (sample_seeds.size() != indices.size()) {
    throw std::invalid_argument(
        fmt::format("{}: {} indices but {} sample seeds", name(), indices.size(), sample_seeds.size()));
  }
  return read_batch(indices, &sample_seeds);
}

}  // namespace colo::data
