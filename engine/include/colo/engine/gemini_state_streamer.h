#pragma once
// gemini's state streamed to and from checkpoints (GeminiCheckpointIO saves and loads through
// it; GeminiModel's and GeminiOptimizer's full_state are it, at once): chunk by chunk, so that no
// rank ever holds a second whole copy of the model or its optimizer state. A view of a
// GeminiChunkOwner, made when needed; it keeps nothing of its own.

#include <colo/checkpoint/safetensors.h>
#include <torch/torch.h>

#include <cstddef>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace colo::amp {
class DynamicLossScaler;
}

namespace colo {

class GeminiChunkOwner;

// A checkpoint set read piece by piece: what it holds (from the headers alone) and the values of
// the tensors asked for. Over files (GeminiCheckpointIO) or over tensors in memory.
struct CheckpointSetReader {
  std::vector<checkpoint::TensorInfo> entries;
  std::function<checkpoint::NamedTensors(const std::set<std::string>& names)> read;

  static CheckpointSetReader over(const checkpoint::NamedTensors& tensors);
  // The entries as tensors without storage (meta device): what a check of names and shapes needs.
  checkpoint::NamedTensors shapes() const;
};

class GeminiStateStreamer {
 public:
  explicit GeminiStateStreamer(GeminiChunkOwner& chunks) : chunks_(chunks) {}

  // Which of a chunk's fp32 shards.
  enum class ChunkState { kMaster, kExpAvg, kExpAvgSq };
  // Chunk c's parameters' full values of one shard state, in the chunk's order, shaped as the
  // parameters. Collective over the group.
  std::vector<torch::Tensor> gather_chunk(std::size_t c, ChunkState which) const;

  // Values of chunked parameters' state made one chunk at a time: get(i), for chunked parameters
  // asked for in their order, gathers i's chunk when it is not the one held and forgets a chunk
  // once its last parameter was taken, so that at most one chunk is ever whole. Collective: every
  // rank asks for the same parameters in the same order.
  class ChunkStream {
   public:
    ChunkStream(GeminiChunkOwner& chunks, ChunkState which) : chunks_(chunks), which_(which) {}
    torch::Tensor get(std::size_t i);

   private:
    GeminiChunkOwner& chunks_;
    ChunkState which_;
    std::size_t held_chunk_ = static_cast<std::size_t>(-1);
    std::vector<torch::Tensor> held_;
  };

  // The model's state (ModelWrapper::full_state) as entries made when written: every parameter
  // and buffer under its canonical name, the chunked parameters as their fp32 masters, gathered
  // one chunk at a time. Collective: every rank makes every entry's values, in order.
  std::vector<checkpoint::PendingTensor> model_entries() const;
  // Writes a model state, checked beforehand (names and shapes), chunk by chunk: the masters
  // take the saved values themselves, the working shards their rounding. Local.
  void load_model(const CheckpointSetReader& reader) const;

  // The optimizer's tensors (OptimizerWrapper::full_state), made when written: Adam's moments and
  // step count once a step was taken, and under bf16/fp16 "master.<param>" of every model
  // parameter. Collective, as model_entries().
  std::vector<checkpoint::PendingTensor> optimizer_entries() const;
  // Loads the optimizer's state: everything is checked from the entries' shapes (and the step
  // counts' values) first, naming `caller` (nothing changes on an error); then each chunk's
  // entries are read and scattered into its shards; then the scalars go to `optimizer` and
  // `scaler`. Local.
  void load_optimizer(const CheckpointSetReader& reader, const std::map<std::string, double>& scalars,
                      torch::optim::Optimizer& optimizer, amp::DynamicLossScaler* scaler,
                      const std::string& caller) const;

  // The fp32 master of every chunked parameter, full shape, canonical names, gathered chunk by
  // chunk. Collective over the group.
  std::vector<std::pair<std::string, torch::Tensor>> full_masters() const;
  // Writes chunk c's full values (one tensor per parameter, in the chunk's order) into its
  // masters and working parameters, and, unless empty, into Adam's moments. Local.
  void load_chunk(std::size_t c, const std::vector<torch::Tensor>& masters, const std::vector<torch::Tensor>& exp_avg = {},
                  const std::vector<torch::Tensor>& exp_avg_sq = {}) const;
  // Writes `values` (one full tensor per chunked parameter by canonical name) into the masters
  // and the working parameters, chunk by chunk. Local.
  void load_masters(const std::map<std::string, torch::Tensor>& values) const;

 private:
  GeminiChunkOwner& chunks_;
};

}  // namespace colo
