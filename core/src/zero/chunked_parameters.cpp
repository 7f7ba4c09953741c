#include <c10/core/StorageImpl.h>
#include <colo/zero/allocate.h>
#include <colo/zero/chunked_parameters.h>
#include <colo/zero/pinned_staging.h>
#include <colo/zero/shard_layout.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <stdexcept>

namespace colo::zero {
namespace {

int64_t storage_bytes(const torch::Tensor& t) { return static_cast<int64_t>(t.storage().nbytes()); }

int64_t tensor_bytes(const torch::Tensor& t) {
  return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
}

}  // namespace

ChunkedParameters::ChunkedParameters(std::vector<torch::Tensor> params, std::vector<std::vector<std::size_t>> chunks,
                                     std::vector<std::shared_ptr<const ShardLayout>> layouts,
                                     std::vector<ChunkPlacement> placement, std::shared_ptr<dist::ProcessGroup> group,
                                     ChunkedParametersOptions options)
    : group_(std::move(group)), options_(options) {
  if (!group_) throw std::invalid_argument("ChunkedParameters: the process group is null");
  if (layouts.size() != chunks.size() || placement.size() != chunks.size()) {
    throw std::invalid_argument("ChunkedParameters: one layout and one placement per chunk");
  }
  rank_ = group_->rank();
  device_ = params.empty() ? torch::Device(torch::kCPU) : params.front().device();
  const auto working = torch::TensorOptions(device_).dtype(options_.working_dtype());
  const auto host = torch::TensorOptions(torch::kCPU)
                        .dtype(options_.working_dtype())
                        .pinned_memory(options_.pin_memory() && device_.is_cuda());
  torch::NoGradGuard no_grad;
  chunks_.resize(chunks.size());
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    auto& chunk = chunks_[c];
    chunk.params = std::move(chunks[c]);
    chunk.layout = std::move(layouts[c]);
    chunk.placement = placement[c];
    const auto& layout = *chunk.layout;
    if (layout.num_params() != chunk.params.size() || layout.num_buckets() != 1 ||
        layout.world_size() != group_->size()) {
      throw std::invalid_argument(fmt::format(
          "ChunkedParameters: chunk {} has {} parameters over {} ranks; its layout must have as many, in one bucket",
          c, chunk.params.size(), group_->size()));
    }
    chunk.full = allocate(layout.padded_bucket_numel(0), working, fmt::format("the gathered parameters of chunk {}", c),
                          "Use a smaller chunk_size_mb");
    chunk.full.zero_();
    for (std::size_t k = 0; k < chunk.params.size(); ++k) {
      auto& param = params.at(chunk.params[k]);
      if (param.numel() != layout.param_numel(k) || param.device() != device_) {
        throw std::invalid_argument(fmt::format("ChunkedParameters: parameter {} of chunk {} must have {} elements on {}",
                                                k, c, layout.param_numel(k), device_.str()));
      }
      auto slot = chunk.full.narrow(0, layout.offset_in_bucket(k), param.numel()).view(param.sizes());
      slot.copy_(param.detach());
      param.set_data(slot);
    }
    if (!chunk.placement.sharded) continue;
    const auto piece = chunk.full.narrow(0, rank_ * layout.chunk_numel(0), layout.chunk_numel(0));
    const bool on_host = chunk.placement.params_on_host && device_.is_cuda();
    chunk.shard = allocate(layout.chunk_numel(0), on_host ? host : working,
                           fmt::format("the parameter shard of chunk {}", c),
                           on_host ? "Lower offload_param_frac, or set pin_memory=false" : "Raise offload_param_frac");
    chunk.shard.copy_(piece);
    gathered_bytes_ += tensor_bytes(chunk.full);  // counted as gathered until its release, just below
    free_storage(chunk);
  }
}

ChunkedParameters::~ChunkedParameters() {
  for (auto& chunk : chunks_) {
    try {
      if (chunk.pending) chunk.work.wait();
    } catch (...) {  // a destructor must not throw; the group reports its own failures
    }
  }
}

void ChunkedParameters::allocate_storage(Chunk& chunk) {
  if (chunk.allocated) return;
  auto* storage = chunk.full.storage().unsafeGetStorageImpl();
  const auto nbytes = static_cast<std::size_t>(tensor_bytes(chunk.full));
  try {
    storage->set_data_ptr_noswap(storage->allocator()->allocate(nbytes));
  } catch (const c10::Error& e) {
    const std::string cause = e.what_without_backtrace();
    throw AllocationError(fmt::format(
        "could not allocate {} of {} memory to gather a chunk of parameters: {}. Lower max_prefetch, use a smaller "
        "chunk_size_mb, or a smaller batch",
        format_bytes(static_cast<int64_t>(nbytes)), device_.str(), cause.substr(0, cause.find('\n'))));
  }
  storage->set_nbytes(nbytes);
  chunk.allocated = true;
  gathered_bytes_ += static_cast<int64_t>(nbytes);
  peak_gathered_bytes_ = std::max(peak_gathered_bytes_, gathered_bytes_);
}

void ChunkedParameters::free_storage(Chunk& chunk) {
  if (!chunk.allocated) return;
  gathered_bytes_ -= storage_bytes(chunk.full);
  // The storage object stays (every parameter view of the chunk holds it); only its memory goes.
  chunk.full.storage().unsafeGetStorageImpl()->reset();
  chunk.allocated = false;
}

void ChunkedParameters::start_gather(std::size_t c, const torch::Tensor& source) {
  auto& chunk = chunks_[c];
  torch::NoGradGuard no_grad;
  auto input = source;
  if (input.device() != device_) {
    chunk.staging = input.to(device_, /*non_blocking=*/true);
    input = chunk.staging;
  }
  if (input.scalar_type() != chunk.full.scalar_type()) input = input.to(chunk.full.scalar_type());
  if (group_->size() == 1) {
    chunk.full.copy_(input);
    chunk.staging = torch::Tensor();
    return;
  }
  auto output = chunk.full;
  if (group_->backend() == dist::Backend::kGloo) {  // an exact copy of any dtype (Gloo has no bf16 in 1.13)
    input = input.view(torch::kByte);
    output = output.view(torch::kByte);
  }
  chunk.work = group_->all_gather(output, input);
  chunk.pending = true;
}

void ChunkedParameters::wait(Chunk& chunk) {
  if (!chunk.pending) return;
  chunk.work.wait();
  chunk.work = dist::Work();
  chunk.pending = false;
  chunk.staging = torch::Tensor();
}

void ChunkedParameters::prefetch(std::size_t c) {
  auto& chunk = chunks_.at(c);
  if (!chunk.placement.sharded || chunk.allocated) return;
  allocate_storage(chunk);
  start_gather(c, chunk.shard);
}

void ChunkedParameters::fetch(std::size_t c) {
  prefetch(c);
  wait(chunks_[c]);
}

void ChunkedParameters::release(std::size_t c) {
  auto& chunk = chunks_.at(c);
  if (!chunk.placement.sharded) return;
  wait(chunk);
  free_storage(chunk);
}

void ChunkedParameters::release_all() {
  for (std::size_t c = 0; c < chunks_.size(); ++c) release(c);
}

bool ChunkedParameters::readable(std::size_t c) const {
  const auto& chunk = chunks_.at(c);
  return chunk.allocated && !chunk.pending;
}

void ChunkedParameters::share_shard(std::size_t c, const torch::Tensor& master) {
  auto& chunk = chunks_.at(c);
  if (!chunk.placement.sharded || master.scalar_type() != chunk.shard.scalar_type() ||
      master.numel() != chunk.shard.numel() || master.device() != chunk.shard.device()) {
    throw std::invalid_argument(fmt::format("ChunkedParameters::share_shard: chunk {} cannot share this tensor", c));
  }
  chunk.shard = master;  // equal values: both are the parameters' fp32 values
  chunk.shard_shared = true;
}

void ChunkedParameters::update_from_master(std::size_t c, const torch::Tensor& master) {
  auto& chunk = chunks_.at(c);
  torch::NoGradGuard no_grad;
  if (chunk.placement.sharded) {
    if (chunk.shard_shared) return;
    if (master.device() == chunk.shard.device()) {
      chunk.shard.copy_(master);
      return;
    }
    // A host master of a device shard: rounded to the working dtype by the CPU into a pinned
    // staging buffer, copied on the copy stream while the CPU steps the next chunk.
    if (!uploads_) {
      int64_t largest = 0;
      for (const auto& other : chunks_) largest = std::max(largest, other.layout->chunk_numel(0));
      uploads_ = std::make_unique<PinnedStaging>(
          device_, PinnedStagingOptions()
                       .slot_bytes(largest * static_cast<int64_t>(c10::elementSize(options_.working_dtype())))
                       .slots(options_.staging_slots())
                       .pin_memory(options_.pin_memory()));
    }
    uploads_->upload(chunk.shard, [&master](const torch::Tensor& host) { host.copy_(master); });
    return;
  }
  wait(chunk);
  start_gather(c, master);
}

void ChunkedParameters::finish_updates() {
  if (uploads_) uploads_->finish();
}

int64_t ChunkedParameters::staging_bytes() const { return uploads_ ? uploads_->staging_bytes() : 0; }

void ChunkedParameters::load_values(std::size_t c, const std::vector<torch::Tensor>& full) {
  auto& chunk = chunks_.at(c);
  wait(chunk);
  torch::NoGradGuard no_grad;
  if (chunk.placement.sharded) {
    chunk.layout->copy_to_shard(rank_, full, chunk.shard);
    if (chunk.allocated) {  // a gathered chunk shows the loaded values at once
      for (std::size_t k = 0; k < full.size(); ++k) {
        chunk.full.narrow(0, chunk.layout->offset_in_bucket(k), full[k].numel()).copy_(full[k].reshape(-1));
      }
    }
    return;
  }
  for (std::size_t k = 0; k < full.size(); ++k) {
    chunk.full.narrow(0, chunk.layout->offset_in_bucket(k), full[k].numel()).copy_(full[k].reshape(-1));
  }
}

int64_t ChunkedParameters::resident_device_bytes() const {
  int64_t bytes = 0;
  for (const auto& chunk : chunks_) {
    if (!chunk.placement.sharded) {
      bytes += tensor_bytes(chunk.full);
    } else if (!chunk.shard_shared && chunk.shard.device() == device_) {
      bytes += tensor_bytes(chunk.shard);
    }
  }
  return bytes;
}

int64_t ChunkedParameters::resident_host_bytes() const {
  int64_t bytes = 0;
  for (const auto& chunk : chunks_) {
    if (chunk.placement.sharded && !chunk.shard_shared && chunk.shard.device() != device_) bytes += tensor_bytes(chunk.shard);
  }
  return bytes;
}

}  // namespace colo::zero
