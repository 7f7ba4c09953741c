#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <colo/data/data_loader.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/cuda.h>

#include <time.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "decode_phases.h"
#include "seed_mix.h"

namespace colo::data {
namespace detail {

// Distinguishes the augmentation's seeds from the shuffle's, which uses the seed directly.
constexpr uint64_t kAugmentationStream = 0x61756720ULL;
// And the batch mixing's (mixup, CutMix), drawn per batch in next().
constexpr uint64_t kMixupStream = 0x6d697875ULL;

// The loader's statistics, updated by its worker threads and read by the caller.
struct LoaderCounters {
  std::atomic<int64_t> images{0};
  std::atomic<int64_t> batches{0};
  std::atomic<int64_t> worker_cpu_ns{0};
  std::atomic<int64_t> wait_ns{0};
};


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
        augment_(options.augment()),
        device_(options.device()),
        pin_memory_(options.pin_memory() && options.device().is_cuda()) {}

  int64_t num_batches() const { return num_batches_; }
  const torch::Device& device() const { return device_; }

  // Batch `index` of the epoch, read and transformed: on the CPU, or on the device where the data
  // set makes it there (get_device_batch: an ImageFolder decoding with nvJPEG), on the current
  // stream.
  Batch host_batch(int64_t index) const {
    const int64_t begin = index * batch_size_;
    const int64_t end = std::min(begin + batch_size_, static_cast<int64_t>(indices_.size()));
    const std::vector<int64_t> samples(indices_.begin() + begin, indices_.begin() + end);
    std::vector<uint64_t> seeds;
    if (augment_) {
      seeds.reserve(samples.size());
      for (const int64_t sample : samples) seeds.push_back(combine_seeds(epoch_seed_, static_cast<uint64_t>(sample)));
    }
    std::optional<Batch> on_device;
    if (device_.is_cuda()) on_device = dataset_->get_device_batch(samples, augment_ ? &seeds : nullptr, device_);
    Batch batch = on_device                   ? std::move(*on_device)
                  : augment_                  ? dataset_->get_augmented_batch(samples, seeds)
                                              : dataset_->get_batch(samples);
    check(batch, static_cast<int64_t>(samples.size()));
    batch.images = transform_(batch.images, seeds);
    return batch;
  }

  // Copies a host batch to the device on the current stream: from pinned memory and without
  // blocking the host when the device is CUDA. The copy into pinned memory is a plain memcpy in
  // this thread: a LibTorch copy of a large tensor would start an OpenMP team of all the cores
  // from every worker thread.
  Batch to_device(Batch batch) const {
    if (device_.is_cpu()) return batch;
    auto copy = [&](const torch::Tensor& tensor) {
      if (tensor.device() == device_) return tensor;  // made there (get_device_batch)
      torch::Tensor source = tensor;
      if (pin_memory_) {
        const torch::Tensor contiguous = tensor.contiguous();
        source = torch::empty(contiguous.sizes(), contiguous.options().pinned_memory(true));
        std::memcpy(source.data_ptr(), contiguous.data_ptr(), contiguous.nbytes());
      }
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
  bool augment_;
  torch::Device device_;
  bool pin_memory_;
};

// Worker threads that prepare batches first_batch, first_batch + 1, ... ahead of the caller, each
// taking the next batch not yet taken, at most `depth` batches taken and not yet popped. pop()
// returns them in order. On CUDA each worker copies on a stream of its own, so copies overlap the
// caller's computation; pop() makes the caller's stream wait for the copy's event.
class Prefetcher {
 public:
  Prefetcher(std::shared_ptr<const BatchProducer> producer, std::shared_ptr<LoaderCounters> counters,
             int64_t first_batch, int64_t depth, int64_t workers)
      : producer_(std::move(producer)),
        counters_(std::move(counters)),
        depth_(std::max(depth, workers)),
        next_to_take_(first_batch),
        next_to_pop_(first_batch) {
    threads_.reserve(static_cast<size_t>(workers));
    for (int64_t i = 0; i < workers; ++i) threads_.emplace_back([this] { run(); });
  }

  ~Prefetcher() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    for (auto& thread : threads_) thread.join();
  }

  Batch pop() {
    std::optional<Item> item;
    {
      const auto start = std::chrono::steady_clock::now();
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [this] { return ready_.count(next_to_pop_) > 0; });
      auto node = ready_.extract(next_to_pop_);
      item.emplace(std::move(node.mapped()));
      ++next_to_pop_;
      counters_->wait_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
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

  void run() {
    const torch::Device& device = producer_->device();
    std::optional<c10::Stream> copy_stream;
    for (;;) {
      int64_t index = 0;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [this] {
          return stop_ || failed_ || next_to_take_ >= producer_->num_batches() || next_to_take_ < next_to_pop_ + depth_;
        });
        if (stop_ || failed_ || next_to_take_ >= producer_->num_batches()) return;
        index = next_to_take_++;
      }
      Item item;
      const int64_t cpu_start = thread_cpu_ns();
      try {
        if (device.is_cuda()) {
          // A high-priority stream: a batch's few small kernels (nvJPEG's, the resize, the
          // normalisation) need not queue behind the training's, which fill the GPU. (It did not
          // cure the nvJPEG loader's slowdown during training: docs/gpu_jpeg_decoding.md.)
          if (!copy_stream) {
            copy_stream = c10::impl::VirtualGuardImpl(device.type()).getStreamFromGlobalPool(device, /*isHighPriority=*/true);
          }
          // Reading too: a data set that decodes on the GPU does so on this worker's stream.
          c10::StreamGuard guard(*copy_stream);
          Batch batch = producer_->host_batch(index);
          batch = producer_->to_device(std::move(batch));
          item.ready.emplace(device.type());
          item.ready->record(*copy_stream);
          item.batch = std::move(batch);
        } else {
          item.batch = producer_->to_device(producer_->host_batch(index));
        }
        counters_->images += item.batch.size();
        counters_->batches += 1;
      } catch (...) {
        item.error = std::current_exception();
      }
      counters_->worker_cpu_ns += thread_cpu_ns() - cpu_start;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        // After a failure no later batch is taken: the caller rethrows, drops this prefetcher
        // and starts over at the failed batch.
        if (item.error) failed_ = true;
        ready_.emplace(index, std::move(item));
      }
      changed_.notify_all();
    }
  }

  std::shared_ptr<const BatchProducer> producer_;
  std::shared_ptr<LoaderCounters> counters_;
  int64_t depth_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<int64_t, Item> ready_;
  int64_t next_to_take_;
  int64_t next_to_pop_;
  bool stop_ = false;
  bool failed_ = false;
  std::vector<std::thread> threads_;  // last: start once everything above exists
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
  if (options.num_workers() < 1) {
    errors.push_back(fmt::format("num_workers must be >= 1 (prefetch 0 reads in the caller's thread), got {}",
                                 options.num_workers()));
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
  } else if (auto problem = dataset->device_problem(options.device()); !problem.empty()) {
    errors.push_back(std::move(problem));
  }
  try {
    const ImageTransform transform = make_transform(*dataset, options);
    if (options.mixup()) {
      const Mixup mixup(*options.mixup(), dataset->num_classes());
      const ImageShape shape = transform.output_shape();
      if (const auto problem = mixup.check_batch(options.batch_size(), shape.height, shape.width); !problem.empty())
        errors.push_back(problem);
      if (!options.drop_last()) {
        errors.emplace_back("mixup needs drop_last: a short last batch could be odd, and timm mixes only whole batches");
      }
    }
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
      transform_(make_transform(*dataset_, options_)),
      counters_(std::make_shared<detail::LoaderCounters>()) {
  if (options_.mixup()) mixup_ = std::make_shared<const Mixup>(*options_.mixup(), dataset_->num_classes());
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
    const int64_t cpu_start = detail::thread_cpu_ns();
    const auto wall_start = std::chrono::steady_clock::now();
    batch = producer_->to_device(producer_->host_batch(next_batch_));
    counters_->worker_cpu_ns += detail::thread_cpu_ns() - cpu_start;
    // The caller did the work itself: all of it is waiting.
    counters_->wait_ns +=
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - wall_start).count();
    counters_->images += batch.size();
    counters_->batches += 1;
  } else {
    if (!prefetcher_) {
      prefetcher_ = std::make_unique<detail::Prefetcher>(producer_, counters_, next_batch_, options_.prefetch(),
                                                         options_.num_workers());
    }
    try {
      batch = prefetcher_->pop();
    } catch (...) {
      prefetcher_.reset();
      throw;
    }
  }
  if (mixup_) {
    // On the device, in the caller's stream (which waited for the copy above).
    const uint64_t stream = detail::combine_seeds(detail::combine_seeds(options_.seed(), detail::kMixupStream),
                                                  static_cast<uint64_t>(epoch()));
    SeededMixupDraws draws(detail::combine_seeds(detail::combine_seeds(stream, static_cast<uint64_t>(next_batch_)),
                                                 static_cast<uint64_t>(options_.rank())));
    batch = (*mixup_)(std::move(batch), draws, mixup_->enabled_in_epoch(epoch()));
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

void DataLoader::check_state(const DataLoaderState& state) const { (void)resolved_next_batch(state); }

void DataLoader::load_state(const DataLoaderState& state) {
  const int64_t next_batch = resolved_next_batch(state);
  sampler_.set_epoch(state.epoch);
  restart(next_batch);
}

int64_t DataLoader::resolved_next_batch(const DataLoaderState& state) const {
  int64_t next_batch = state.next_batch;
  const int64_t own_unit = options_.batch_size() * sampler_.num_replicas();
  if (state.images_per_batch < 0) {
    throw std::invalid_argument(
        fmt::format("DataLoader::load_state: images_per_batch {} is negative", state.images_per_batch));
  }
  if (state.images_per_batch > 0 && state.images_per_batch != own_unit && next_batch >= 0) {
    // Saved by a loader of another shape: the same image of the epoch, in this loader's batches.
    const int64_t images = next_batch * state.images_per_batch;
    if (images % own_unit != 0) {
      throw std::invalid_argument(fmt::format(
          "DataLoader::load_state: the state is {} batches of {} images (over all replicas) into epoch {}, {} images, "
          "which is no whole number of this loader's batches of {} ({} x {} replicas); resume with a batch size and "
          "replica count whose product divides {}",
          next_batch, state.images_per_batch, state.epoch, images, own_unit, options_.batch_size(),
          sampler_.num_replicas(), images));
    }
    next_batch = images / own_unit;
  }
  if (state.epoch < 0 || next_batch < 0 || next_batch > num_batches()) {
    throw std::invalid_argument(fmt::format(
        "DataLoader::load_state: batch {} of epoch {} does not exist in this loader ({} batches per epoch); was the "
        "state saved with another data set, batch size or number of data-parallel replicas?",
        next_batch, state.epoch, num_batches()));
  }
  return next_batch;
}

int64_t DataLoader::num_batches() const { return producer_->num_batches(); }

DataLoaderStats DataLoader::stats() const {
  DataLoaderStats stats;
  stats.images = counters_->images.load();
  stats.batches = counters_->batches.load();
  stats.worker_cpu_seconds = static_cast<double>(counters_->worker_cpu_ns.load()) * 1e-9;
  stats.wait_seconds = static_cast<double>(counters_->wait_ns.load()) * 1e-9;
  return stats;
}

DataLoader::Iterator::Iterator(DataLoader* loader) : loader_(loader), batch_(loader->next()) {}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  batch_ = loader_->next();
  return *this;
}

}  // namespace colo::data
