#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <colo/data/data_loader.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/cuda.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "seed_mix.h"

namespace colo::data {
namespace detail {

// Distinguishes the augmentation's seeds from the shuffle's, which uses the seed directly.
constexpr uint64_t kAugmentationStream = 0x61756720ULL;

// Everything that determines the batches of one epoch on one replica. Immutable, so the caller
// and the prefetch thread share it without locks.
class BatchProducer {
 public:
  BatchProducer(std::shared_ptr<const Dataset> dataset, const ImageTransform& transform, std::vector<int64_t> indices,
                const DataLoaderOptions& options, int64_t epoch)
      : dataset_(std::move(dataset)),
        transform_(transform),
        indices_(std::move(indices)),
        batch_size_(options.batch_size()),
        num_batches_(options.drop_last() ? static_cast<int64_t>(indices_.size()) / batch_size_
                                         : (static_cast<int64_t>(indices_.size()) + batch_size_ - 1) / batch_size_),
        epoch_seed_(combine_seeds(combine_seeds(options.seed(), kAugmentationStream), static_cast<uint64_t>(epoch))),
        device_(options.device()),
        pin_memory_(options.pin_memory() && options.device().is_cuda()) {}

  int64_t num_batches() const { return num_batches_; }
  const torch::Device& device() const { return device_; }

  // Batch `index` of the epoch, read, transformed, still on the CPU.
  Batch host_batch(int64_t index) const {
    const int64_t begin = index * batch_size_;
    const int64_t end = std::min(begin + batch_size_, static_cast<int64_t>(indices_.size()));
    const std::vector<int64_t> samples(indices_.begin() + begin, indices_.begin() + end);
    Batch batch = dataset_->get_batch(samples);
    check(batch, static_cast<int64_t>(samples.size()));
    std::vector<uint64_t> seeds;
    if (transform_.options().augmentation.enabled()) {
      seeds.reserve(samples.size());
      for (const int64_t sample : samples) seeds.push_back(combine_seeds(epoch_seed_, static_cast<uint64_t>(sample)));
    }
    batch.images = transform_(batch.images, seeds);
    return batch;
  }

  // Copies a host batch to the device on the current stream: from pinned memory and without
  // blocking the host when the device is CUDA.
  Batch to_device(Batch batch) const {
    if (device_.is_cpu()) return batch;
    auto copy = [&](const torch::Tensor& tensor) {
      const torch::Tensor source = pin_memory_ ? tensor.pin_memory() : tensor;
      return source.to(source.options().device(device_), /*non_blocking=*/pin_memory_);
    };
    return {copy(batch.images), copy(batch.labels)};
  }

 private:
  // A Dataset is an extension point: fail here, naming it, rather than deep inside the model.
  void check(const Batch& batch, int64_t count) const {
    const ImageShape shape = dataset_->image_shape();
    const auto& images = batch.images;
    const auto& labels = batch.labels;
    if (!images.defined() || images.dim() != 4 || images.size(0) != count || images.size(1) != shape.channels ||
        images.size(2) != shape.height || images.size(3) != shape.width || images.scalar_type() != torch::kFloat ||
        !labels.defined() || labels.dim() != 1 || labels.size(0) != count || labels.scalar_type() != torch::kLong) {
      throw std::logic_error(fmt::format(
          "{}: get_batch of {} indices must return float images [{}, {}, {}, {}] and int64 labels [{}], got {} {} "
          "and {} {}",
          dataset_->name(), count, count, shape.channels, shape.height, shape.width, count,
          images.defined() ? c10::toString(images.scalar_type()) : "undefined",
          images.defined() ? c10::str(images.sizes()) : "",
          labels.defined() ? c10::toString(labels.scalar_type()) : "undefined",
          labels.defined() ? c10::str(labels.sizes()) : ""));
    }
  }

  std::shared_ptr<const Dataset> dataset_;
  ImageTransform transform_;
  std::vector<int64_t> indices_;  // this replica's shard of the epoch
  int64_t batch_size_;
  int64_t num_batches_;
  uint64_t epoch_seed_;
  torch::Device device_;
  bool pin_memory_;
};

// A thread that prepares batches first_batch, first_batch + 1, … ahead of the caller, at most
// `depth` of them waiting. On CUDA it copies on a stream of its own, so copies overlap the
// caller's computation; pop() makes the caller's stream wait for the copy's event.
class Prefetcher {
 public:
  Prefetcher(std::shared_ptr<const BatchProducer> producer, int64_t first_batch, int64_t depth)
      : producer_(std::move(producer)),
        depth_(static_cast<size_t>(depth)),
        thread_([this, first_batch] { run(first_batch); }) {}

  ~Prefetcher() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }

  Batch pop() {
    std::optional<Item> item;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [this] { return !queue_.empty(); });
      item.emplace(std::move(queue_.front()));
      queue_.pop_front();
    }
    changed_.notify_all();
    if (item->error) std::rethrow_exception(item->error);
    if (item->ready) {
      const torch::Device& device = producer_->device();
      const c10::Stream stream = c10::impl::VirtualGuardImpl(device.type()).getStream(device);
      item->ready->block(stream);
      // The tensors were allocated on the copy stream; the caching allocator must not hand their
      // memory out again before the caller's stream is done with them.
      item->batch.images.record_stream(stream);
      item->batch.labels.record_stream(stream);
    }
    return std::move(item->batch);
  }

 private:
  struct Item {
    Batch batch;
    std::exception_ptr error;
    std::optional<c10::Event> ready;  // recorded after the copy to a CUDA device
  };

  void run(int64_t first_batch) {
    const torch::Device& device = producer_->device();
    std::optional<c10::Stream> copy_stream;
    for (int64_t index = first_batch; index < producer_->num_batches(); ++index) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [this] { return stop_ || queue_.size() < depth_; });
        if (stop_) return;
      }
      Item item;
      try {
        Batch batch = producer_->host_batch(index);
        if (device.is_cuda()) {
          if (!copy_stream) copy_stream = c10::impl::VirtualGuardImpl(device.type()).getStreamFromGlobalPool(device);
          c10::StreamGuard guard(*copy_stream);
          batch = producer_->to_device(std::move(batch));
          item.ready.emplace(device.type());
          item.ready->record(*copy_stream);
        } else {
          batch = producer_->to_device(std::move(batch));
        }
        item.batch = std::move(batch);
      } catch (...) {
        item.error = std::current_exception();
      }
      const bool failed = item.error != nullptr;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        queue_.push_back(std::move(item));
      }
      changed_.notify_all();
      if (failed) return;  // the caller rethrows, drops this prefetcher and starts over at that batch
    }
  }

  std::shared_ptr<const BatchProducer> producer_;
  size_t depth_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Item> queue_;
  bool stop_ = false;
  std::thread thread_;  // last: starts once everything above exists
};

}  // namespace detail

namespace {

ImageTransform make_transform(const Dataset& dataset, const DataLoaderOptions& options) {
  ImageTransform::Options transform;
  if (options.augment()) transform.augmentation = options.augmentation().value_or(dataset.default_augmentation());
  if (options.normalize()) transform.normalization = options.normalization().value_or(dataset.default_normalization());
  transform.image_size = options.image_size();
  transform.channels = options.channels();
  return ImageTransform(transform, dataset.image_shape());
}

// Checks every option at once, so that one run reports everything to fix.
DataLoaderOptions validated(const std::shared_ptr<const Dataset>& dataset, DataLoaderOptions options) {
  if (!dataset) throw std::invalid_argument("DataLoader: the data set is null");
  std::vector<std::string> errors;
  const int64_t size = dataset->size();
  const int64_t replicas = options.num_replicas();
  if (options.batch_size() < 1)
    errors.push_back(fmt::format("batch_size must be positive, got {}", options.batch_size()));
  if (options.prefetch() < 0) {
    errors.push_back(fmt::format("prefetch must be >= 0 (0: no background thread), got {}", options.prefetch()));
  }
  if (replicas < 1 || options.rank() < 0 || options.rank() >= replicas) {
    errors.push_back(
        fmt::format("rank {} of {} replicas: num_replicas (the data-parallel size) must be positive and "
                    "rank (the data-parallel rank) in [0, num_replicas)",
                    options.rank(), replicas));
  } else if (options.drop_last() && options.batch_size() > 0 && size / replicas < options.batch_size()) {
    errors.push_back(
        fmt::format("with drop_last, {} samples over {} replicas leave {} per replica, less than one "
                    "batch of {}: no batches at all; lower batch_size or turn drop_last off",
                    size, replicas, size / replicas, options.batch_size()));
  }
  if (options.device().is_cuda() && !torch::cuda::is_available()) {
    errors.push_back(fmt::format("device {} asked for, but this LibTorch has no CUDA or no GPU is visible; use the CPU",
                                 options.device().str()));
  }
  try {
    make_transform(*dataset, options);
  } catch (const std::invalid_argument& error) {
    errors.push_back(error.what());
  }
  if (!errors.empty()) {
    throw std::invalid_argument(fmt::format("DataLoader over {}: {}", dataset->name(), fmt::join(errors, "; ")));
  }
  // A bare "cuda" means the device current now, not whichever one the prefetch thread starts on.
  if (options.device().is_cuda() && !options.device().has_index()) {
    options.device(c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).getDevice());
  }
  return options;
}

}  // namespace

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)),
      options_(validated(dataset_, std::move(options))),
      sampler_(dataset_->size(), options_.num_replicas(), options_.rank(), options_.shuffle(), options_.seed(),
               options_.drop_last()),
      transform_(make_transform(*dataset_, options_)) {
  restart(0);
}

DataLoader::~DataLoader() = default;
DataLoader::DataLoader(DataLoader&&) noexcept = default;
DataLoader& DataLoader::operator=(DataLoader&&) noexcept = default;

void DataLoader::restart(int64_t next_batch) {
  prefetcher_.reset();
  producer_ = std::make_shared<const detail::BatchProducer>(dataset_, transform_, sampler_.indices(), options_,
                                                            sampler_.epoch());
  next_batch_ = next_batch;
}

std::optional<Batch> DataLoader::next() {
  if (next_batch_ >= producer_->num_batches()) return std::nullopt;
  Batch batch;
  if (options_.prefetch() == 0) {
    batch = producer_->to_device(producer_->host_batch(next_batch_));
  } else {
    if (!prefetcher_) prefetcher_ = std::make_unique<detail::Prefetcher>(producer_, next_batch_, options_.prefetch());
    try {
      batch = prefetcher_->pop();
    } catch (...) {
      prefetcher_.reset();
      throw;
    }
  }
  ++next_batch_;
  return batch;
}

void DataLoader::set_epoch(int64_t epoch) {
  sampler_.set_epoch(epoch);
  restart(0);
}

void DataLoader::reset() {
  prefetcher_.reset();
  next_batch_ = 0;
}

void DataLoader::reshard(int64_t num_replicas, int64_t rank) {
  DataLoaderOptions options = options_;
  options.num_replicas(num_replicas).rank(rank);
  options_ = validated(dataset_, options);
  const int64_t epoch = sampler_.epoch();
  sampler_ = DistributedSampler(dataset_->size(), num_replicas, rank, options_.shuffle(), options_.seed(),
                                options_.drop_last());
  sampler_.set_epoch(epoch);
  restart(0);
}

void DataLoader::load_state(const DataLoaderState& state) {
  if (state.epoch < 0 || state.next_batch < 0 || state.next_batch > num_batches()) {
    throw std::invalid_argument(fmt::format(
        "DataLoader::load_state: batch {} of epoch {} does not exist in this loader ({} batches per epoch); was the "
        "state saved with another data set, batch size or number of data-parallel replicas?",
        state.next_batch, state.epoch, num_batches()));
  }
  sampler_.set_epoch(state.epoch);
  restart(state.next_batch);
}

int64_t DataLoader::num_batches() const { return producer_->num_batches(); }

DataLoader::Iterator::Iterator(DataLoader* loader) : loader_(loader), batch_(loader->next()) {}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  batch_ = loader_->next();
  return *this;
}

}  // namespace colo::data
