#pragma once

#include <colo/dist/process_group.h>
#include <colo/zero/chunk_plan.h>
#include <torch/arg.h>
#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace colo::zero {

class PinnedStaging;
class ShardLayout;

struct ChunkedParametersOptions {
  // The dtype of the working parameters (the compute dtype).
  TORCH_ARG(c10::ScalarType, working_dtype) = torch::kFloat;
  // Parameter shards placed in host memory are pinned (when the device is a GPU), so that their
  // copies to the GPU run asynchronously. Each shard is its own allocation: never one pinned
  // block for the whole model.
  TORCH_ARG(bool, pin_memory) = true;
  // Updated working values of device shards whose masters are in host memory reach the device
  // through a zero::PinnedStaging pool of this many chunk-sized buffers.
  TORCH_ARG(int64_t, staging_slots) = 4;
};

// gemini's working parameters (ZeRO-3): the parameters of each chunk are VIEWS into one padded
// buffer per chunk (the chunk's full tensor, in the working dtype, on the device), laid out as
// the chunk's ShardLayout says. Of a sharded chunk each rank keeps only its shard (on the device
// or in host memory); the full buffer is gathered from the shards when the chunk's layers run
// and released after: release frees the buffer's storage in place, so that the parameter tensors
// (and the autograd graph holding them) stay valid and see the data again at the next gather.
// A replicated chunk (placement.sharded false) keeps its full buffer; after a step it is
// all-gathered from the updated masters, as low_level_zero does.
//
// Gathers are asynchronous: prefetch(c) starts one, fetch(c) waits for it (starting it first
// when needed). Every rank must fetch, prefetch and release chunks in the same order (the
// model's layer order makes it so): the gathers are collectives of the group.
//
// Memory is measured from the tensors: gathered_bytes() is the storage of the sharded chunks'
// full buffers allocated now, peak_gathered_bytes() its maximum since reset_peak().
class ChunkedParameters {
 public:
  // `params`: every chunked parameter, on one device. `chunks`: indices into params per chunk,
  // in forward order; `layouts`: per chunk, the ShardLayout of its parameters (one bucket, in
  // the chunk's order); `placement`: per chunk. The parameters are re-pointed (set_data) at their
  // places in the chunk buffers, keeping their values rounded to the working dtype; sharded
  // chunks then keep their shard and release the buffer.
  ChunkedParameters(std::vector<torch::Tensor> params, std::vector<std::vector<std::size_t>> chunks,
                    std::vector<std::shared_ptr<const ShardLayout>> layouts, std::vector<ChunkPlacement> placement,
                    std::shared_ptr<dist::ProcessGroup> group, ChunkedParametersOptions options = {});
  ~ChunkedParameters();
  ChunkedParameters(const ChunkedParameters&) = delete;
  ChunkedParameters& operator=(const ChunkedParameters&) = delete;

  std::size_t num_chunks() const { return chunks_.size(); }
  const std::vector<std::size_t>& chunk_params(std::size_t c) const { return chunks_.at(c).params; }
  const ShardLayout& layout(std::size_t c) const { return *chunks_.at(c).layout; }
  const ChunkPlacement& placement(std::size_t c) const { return chunks_.at(c).placement; }
  const torch::Device& device() const { return device_; }
  c10::ScalarType working_dtype() const { return options_.working_dtype(); }

  // Makes chunk c's parameters readable: gathers it if released, waits for a gather in flight.
  void fetch(std::size_t c);
  // Starts gathering a released sharded chunk; nothing otherwise.
  void prefetch(std::size_t c);
  // Frees a sharded chunk's full buffer (waiting for a gather in flight first); nothing for a
  // replicated one.
  void release(std::size_t c);
  void release_all();
  // The chunk's parameters can be read now (gathered, nothing in flight).
  bool readable(std::size_t c) const;

  // After the optimizer updated chunk c's fp32 master shard (this rank's, `master`, anywhere):
  // the working shard takes its rounding (from a host master: asynchronously, through pinned
  // staging); a replicated chunk starts the all-gather into its full buffer (fetch waits for
  // it). Call with the chunk released or replicated, then finish_updates() after the last.
  void update_from_master(std::size_t c, const torch::Tensor& master);
  // The device's current stream waits for every update in flight (before the next forward).
  void finish_updates();
  // Host memory of the update staging pool, allocated as updates needed it.
  int64_t staging_bytes() const;
  // The working shard of chunk c is `master` itself (fp32 training, both on the same side):
  // no second copy is kept. Call before any gather.
  void share_shard(std::size_t c, const torch::Tensor& master);
  // Every rank has every value (checkpoint loading): writes `full` (one tensor per parameter of
  // chunk c, in its order) into the working shard or buffer. Local, no communication.
  void load_values(std::size_t c, const std::vector<torch::Tensor>& full);

  // Storage of the sharded chunks' full buffers allocated now, and its peak since reset_peak().
  int64_t gathered_bytes() const { return gathered_bytes_; }
  int64_t peak_gathered_bytes() const { return peak_gathered_bytes_; }
  void reset_peak() { peak_gathered_bytes_ = gathered_bytes_; }
  // Bytes this rank keeps for good: working shards and replicated buffers, on the device and in
  // host memory (shared shards are counted by their owner, not here).
  int64_t resident_device_bytes() const;
  int64_t resident_host_bytes() const;

 private:
  struct Chunk {
    std::vector<std::size_t> params;
    std::shared_ptr<const ShardLayout> layout;
    ChunkPlacement placement;
    torch::Tensor full;     // padded buffer; a sharded chunk's storage is freed when released
    torch::Tensor shard;    // this rank's part (sharded chunks), on the device or in host memory
    torch::Tensor staging;  // a host shard's copy on the device while its gather is in flight
    bool shard_shared = false;
    bool allocated = true;
    bool pending = false;
    dist::Work work;
  };

  void start_gather(std::size_t c, const torch::Tensor& source);
  void wait(Chunk& chunk);
  void allocate_storage(Chunk& chunk);
  void free_storage(Chunk& chunk);

  std::shared_ptr<dist::ProcessGroup> group_;
  ChunkedParametersOptions options_;
  torch::Device device_{torch::kCPU};
  int rank_ = 0;
  std::vector<Chunk> chunks_;
  std::unique_ptr<PinnedStaging> uploads_;
  int64_t gathered_bytes_ = 0;
  int64_t peak_gathered_bytes_ = 0;
};

}  // namespace colo::zero
