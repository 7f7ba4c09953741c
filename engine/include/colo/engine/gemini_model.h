#pragma once
// gemini's model half: the layer stack run layer by layer over the chunks of the
// GeminiChunkOwner it holds (gathered just in time, released after). It calls nothing of the
// optimizer's: an optimizer (GeminiOptimizer) borrows the same owner to step the chunks.

#include <colo/amp/precision_policy.h>
#include <colo/checkpoint/safetensors.h>
#include <colo/engine/gemini_chunk_owner.h>
#include <colo/engine/model_wrapper.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace colo {

struct CheckpointSetReader;

// The model as gemini hands it back: its layers' parameters exist in full only around their use.
//
// forward() runs the stack layer by layer. Before layer k it fetches the chunks holding k's
// parameters and starts gathering the next max_prefetch chunks the following layers need (the
// order is the stack's layer order: a LayerStack runs its layers in sequence, so it is known
// before the first step); after layer k it releases the chunks no later layer needs. With
// gradients on, a hook on layer k's output fetches k's chunks again when backward reaches it
// (and prefetches the chunks of the layers before it) and releases the chunks no earlier layer
// uses; the owner's gradient reducer also releases a chunk once all its gradients are taken. What is
// left gathered after backward (the first layer's chunks under no_sync) is released at the next
// forward.
//
// Inputs are cast to the compute dtype and floating outputs returned in fp32 (see TorchDdpModel).
// State (checkpoints) is the fp32 masters, gathered chunk by chunk, under canonical names.
class GeminiModel : public ModelWrapper {
 public:
  // The model is the owner's (GeminiChunkOwner::model()). Throws std::invalid_argument for a null owner.
  explicit GeminiModel(std::shared_ptr<GeminiChunkOwner> owner);

  torch::Tensor forward(const torch::Tensor& input) override;

  std::vector<std::pair<std::string, torch::Tensor>> full_state() const override;
  void load_full_state(const std::vector<std::pair<std::string, torch::Tensor>>& state) override;
  // full_state()'s entries made when written, chunked masters gathered one chunk at a time
  // (collective: every rank makes every entry's values, in order); and loading from a set read
  // chunk by chunk (shapes checked first). GeminiCheckpointIO saves and loads through these.
  std::vector<checkpoint::PendingTensor> pending_full_state() const;
  void load_full_state(const CheckpointSetReader& reader);
  // The chunks this model gathers (and an optimizer borrows to step).
  const std::shared_ptr<GeminiChunkOwner>& chunk_owner() const { return chunks_; }

  // Per layer, the chunks holding its parameters.
  const std::vector<std::vector<std::size_t>>& layer_chunks() const { return layer_chunks_; }
  // What forward may hold gathered at once: the chunks of the layer running (and of a chunk
  // reaching into it from the layer before) plus the prefetched ones, each at the largest
  // chunk's size.
  int64_t gathered_bytes_bound() const;

 private:
  torch::Tensor run_layers(const torch::Tensor& input);
  void prefetch_after(std::size_t layer);
  void prefetch_before(std::size_t layer);
  void on_backward_reaches(std::size_t layer);

  std::shared_ptr<GeminiChunkOwner> chunks_;
  amp::PrecisionPolicy policy_;
  std::vector<std::vector<std::size_t>> layer_chunks_;
  std::vector<std::size_t> last_forward_layer_;   // per chunk
  std::vector<std::size_t> first_forward_layer_;  // per chunk
  int64_t largest_chunk_bytes_ = 0;
};

}  // namespace colo
