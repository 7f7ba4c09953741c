#pragma once

#include <colo/data/batch.h>
#include <colo/data/dataset.h>
#include <colo/data/distributed_sampler.h>
#include <colo/data/image_transform.h>
#include <colo/data/mixup.h>
#include <torch/arg.h>
#include <torch/types.h>

#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>

namespace colo::data {

namespace detail {
class BatchProducer;
class Prefetcher;
struct LoaderCounters;
}  // namespace detail

struct DataLoaderOptions {
  /* implicit */ DataLoaderOptions(int64_t batch_size) : batch_size_(batch_size) {}

  // Images per batch on this replica (the global batch is batch_size × num_replicas).
  TORCH_ARG(int64_t, batch_size);
  // Reshuffle every epoch (see DistributedSampler); off, the order is 0, 1, 2, … as PyTorch's
  // DataLoader defaults to. Training loaders turn it on.
  TORCH_ARG(bool, shuffle) = false;
  // Drop what does not fill a whole batch: the sampler drops the samples that do not divide over
  // the replicas and the loader the last, incomplete batch. With it, the replicas' batch k
  // together are exactly single-process batch k at batch size batch_size × num_replicas; without
  // it, shards are padded by wrapping around (a few samples repeat) and the last batch is short.
  TORCH_ARG(bool, drop_last) = false;
  // Seeds the shuffle and the augmentation.
  TORCH_ARG(uint64_t, seed) = 0;
  // The DATA-PARALLEL size and rank (see DistributedSampler): ranks of one tensor/pipeline
  // group pass the same rank. The Booster sets them with reshard().
  TORCH_ARG(int64_t, num_replicas) = 1;
  TORCH_ARG(int64_t, rank) = 0;
  // Where batches are delivered. For CUDA, batches are copied from pinned memory without
  // blocking, on a side stream when prefetching, and next() makes the caller's current stream
  // wait for the copy.
  TORCH_ARG(torch::Device, device) = torch::kCPU;
  TORCH_ARG(bool, pin_memory) = true;  // only read when the device is CUDA
  // Batches prepared ahead of the caller (read, augment, copy to the device) by background
  // threads, at most max(prefetch, num_workers) of them at a time (a bounded queue). 0 prepares
  // each batch in next(), in the caller's thread.
  TORCH_ARG(int64_t, prefetch) = 2;
  // Threads that prepare batches when prefetching, each a whole batch at a time (batches still
  // arrive in order). More than one pays where reading a batch costs much CPU time: decoding an
  // ImageFolder's JPEGs (benchmarks/data measures it). In-memory data sets need one.
  TORCH_ARG(int64_t, num_workers) = 1;
  // Random crop and flip, for training. The augmentation is the data set's default unless given.
  TORCH_ARG(bool, augment) = false;
  TORCH_ARG(std::optional<Augmentation>, augmentation) = std::nullopt;
  // Per-channel normalisation, with the data set's statistics unless given.
  TORCH_ARG(bool, normalize) = true;
  TORCH_ARG(std::optional<Normalization>, normalization) = std::nullopt;
  // Resize to image_size × image_size; 0 keeps the data set's size.
  TORCH_ARG(int64_t, image_size) = 0;
  // Repeat a grayscale channel into this many (3 for models built for RGB); 0 keeps the data
  // set's channels.
  TORCH_ARG(int64_t, channels) = 0;
  // Mixup / CutMix on each batch once it is on the device (timm's Mixup: mixup.h), in next(), in
  // the caller's thread and stream: the batch's targets become soft labels for the criterion.
  // Its draws are a function of (seed, epoch, batch index, rank), so state()/load_state() resume
  // them too. Needs drop_last and an even batch_size.
  TORCH_ARG(std::optional<MixupOptions>, mixup) = std::nullopt;
};

// Where a loader is: the epoch and the index of the batch next() returns next. Saving it with a
// checkpoint and loading it into a loader built with the same data set and options resumes the
// exact sequence of batches (augmentation included).
//
// images_per_batch is the unit of next_batch: the images one batch holds over all replicas
// (batch_size x num_replicas) in the loader that saved the state; 0 where unknown (a state saved
// before it was recorded: the loading loader's own is assumed). A loader of another shape (fewer
// replicas with larger or more batches, as after colo-run --elastic left ranks out) resumes at
// the same image of the same epoch's order: with drop_last, batch k of every replica together
// holds images [k * images_per_batch, (k + 1) * images_per_batch) of the epoch's permutation
// whatever the shape (DistributedSampler). Equality compares the position (epoch, next_batch).
struct DataLoaderState {
  int64_t epoch = 0;
  int64_t next_batch = 0;
  int64_t images_per_batch = 0;

  bool operator==(const DataLoaderState& other) const { return epoch == other.epoch && next_batch == other.next_batch; }
  bool operator!=(const DataLoaderState& other) const { return !(*this == other); }
};

// What the loader has done since it was built: how many images it prepared, the CPU time its
// workers spent preparing them (reading, decoding, transforming, copying; per core, images /
// worker_cpu_seconds is the loader's own speed), and how long next() waited for a batch (the time
// the caller lost to loading).
struct DataLoaderStats {
  int64_t images = 0;
  int64_t batches = 0;
  double worker_cpu_seconds = 0;
  double wait_seconds = 0;
};

// Iterates this replica's batches of one epoch at a time:
//
//   for (int64_t epoch = loader.epoch(); epoch < num_epochs; ++epoch) {
//     if (epoch != loader.epoch()) loader.set_epoch(epoch);   // keeps a resumed position
//     while (auto batch = loader.next()) train_step(batch->images, batch->labels);
//   }
//
// or, equivalently, `for (Batch& batch : loader)` over the rest of the current epoch. Everything
// random (shuffle, crop offsets, flips) is a function of (seed, epoch, sample index), so batches
// are the same with or without prefetching, and state()/load_state() resume mid-epoch exactly.
// A loader is movable, not copyable; it is used from one thread.
class DataLoader {
 public:
  // Throws std::invalid_argument listing every option that is invalid or does not fit the data
  // set (batch size, ranks, normalisation channels, …).
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options);
  ~DataLoader();
  DataLoader(DataLoader&&) noexcept;
  DataLoader& operator=(DataLoader&&) noexcept;
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // The next batch of the current epoch, or nullopt when the epoch is over. An exception while
  // preparing a batch (in the prefetch thread too) is rethrown here, and the same batch is
  // attempted again by the next call.
  std::optional<Batch> next();

  // Positions the loader at the first batch of an epoch (reshuffling for it).
  void set_epoch(int64_t epoch);
  // Back to the first batch of the current epoch.
  void reset();
  // Splits the data set over other data-parallel replicas (keeps the epoch, restarts it at batch 0).
  void reshard(int64_t num_replicas, int64_t rank);

  DataLoaderState state() const {
    return {epoch(), next_batch_, options_.batch_size() * sampler_.num_replicas()};
  }
  // Throws std::invalid_argument for a negative epoch, a batch index beyond num_batches(), or a
  // state in another unit (images_per_batch) whose position is not a whole number of this
  // loader's batches.
  void load_state(const DataLoaderState& state);
  // load_state's checks alone: throws as it would, changes nothing (Booster::load_state checks
  // every part of a training state before it loads any).
  void check_state(const DataLoaderState& state) const;

  int64_t epoch() const { return sampler_.epoch(); }
  // Batches per epoch on this replica (the same on every replica).
  int64_t num_batches() const;
  const DataLoaderOptions& options() const { return options_; }
  const Dataset& dataset() const { return *dataset_; }
  const DistributedSampler& sampler() const { return sampler_; }
  // Cumulative over the loader's life (resharding and epochs included).
  DataLoaderStats stats() const;
  // The shape of the images in the batches (after resizing and channel expansion).
  ImageShape image_shape() const { return transform_.output_shape(); }

  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    using pointer = Batch*;
    using reference = Batch&;

    Iterator() = default;
    Batch& operator*() { return *batch_; }
    Batch* operator->() { return &*batch_; }
    Iterator& operator++();
    bool operator==(const Iterator& other) const { return batch_.has_value() == other.batch_.has_value(); }
    bool operator!=(const Iterator& other) const { return !(*this == other); }

   private:
    friend class DataLoader;
    explicit Iterator(DataLoader* loader);
    DataLoader* loader_ = nullptr;
    std::optional<Batch> batch_;
  };
  // Continues from the current position (begin() takes the next batch; it does not rewind).
  Iterator begin() { return Iterator(this); }
  Iterator end() { return Iterator(); }

 private:
  void restart(int64_t next_batch);
  // The batch of this loader that `state` points at (load_state's checks; throws as it does).
  int64_t resolved_next_batch(const DataLoaderState& state) const;

  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  DistributedSampler sampler_;
  ImageTransform transform_;
  std::shared_ptr<const detail::BatchProducer> producer_;  // this epoch's shard, immutable
  std::unique_ptr<detail::Prefetcher> prefetcher_;
  std::shared_ptr<detail::LoaderCounters> counters_;  // shared with the worker threads
  std::shared_ptr<const Mixup> mixup_;                 // null unless options().mixup()
  int64_t next_batch_ = 0;
};

}  // namespace colo::data
