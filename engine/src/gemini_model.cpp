#include <colo/engine/gemini_model.h>

#include <colo/engine/gemini_state_streamer.h>
#include <colo/zero/allocate.h>
#include <colo/zero/chunked_parameters.h>
#include <colo/zero/shard_layout.h>

#include <algorithm>
#include <set>
#include <stdexcept>
#include <unordered_map>

#include "master_weights_state.h"

namespace colo {

namespace {

const std::shared_ptr<GeminiChunkOwner>& non_null(const std::shared_ptr<GeminiChunkOwner>& owner) {
  if (!owner) throw std::invalid_argument("GeminiModel: the chunk owner is null");
  return owner;
}

}  // namespace

GeminiModel::GeminiModel(std::shared_ptr<GeminiChunkOwner> owner)
    : ModelWrapper(non_null(owner)->model()),
      chunks_(std::move(owner)),
      policy_(chunks_->options().precision()) {
  auto& chunks = chunks_->chunks();
  std::unordered_map<const void*, std::size_t> chunk_of;
  for (std::size_t c = 0; c < chunks.num_chunks(); ++c) {
    for (auto i : chunks.chunk_params(c)) chunk_of.emplace(chunks_->params()[i].unsafeGetTensorImpl(), c);
    const auto& layout = chunks.layout(c);
    largest_chunk_bytes_ = std::max<int64_t>(
        largest_chunk_bytes_, layout.padded_bucket_numel(0) * static_cast<int64_t>(c10::elementSize(chunks.working_dtype())));
  }
  last_forward_layer_.assign(chunks.num_chunks(), 0);
  first_forward_layer_.assign(chunks.num_chunks(), module_->size());
  for (std::size_t k = 0; k < module_->size(); ++k) {
    std::set<std::size_t> used;
    for (const auto& p : module_->layer(k)->parameters()) {
      auto it = chunk_of.find(p.unsafeGetTensorImpl());
      if (it != chunk_of.end()) used.insert(it->second);
    }
    for (auto c : used) {
      last_forward_layer_[c] = k;
      first_forward_layer_[c] = std::min(first_forward_layer_[c], k);
    }
    layer_chunks_.emplace_back(used.begin(), used.end());
  }
}

int64_t GeminiModel::gathered_bytes_bound() const {
  std::size_t widest = 0;
  for (const auto& chunks : layer_chunks_) widest = std::max(widest, chunks.size());
  return static_cast<int64_t>(widest + static_cast<std::size_t>(chunks_->options().max_prefetch())) *
         largest_chunk_bytes_;
}

void GeminiModel::prefetch_after(std::size_t layer) {
  auto& chunks = chunks_->chunks();
  int64_t budget = chunks_->options().max_prefetch();
  for (std::size_t k = layer + 1; k < layer_chunks_.size() && budget > 0; ++k) {
    for (auto c : layer_chunks_[k]) {
      if (budget == 0) break;
      if (chunks.readable(c) || !chunks.placement(c).sharded) continue;
      chunks.prefetch(c);
      --budget;
    }
  }
}

void GeminiModel::prefetch_before(std::size_t layer) {
  auto& chunks = chunks_->chunks();
  int64_t budget = chunks_->options().max_prefetch();
  for (std::size_t k = layer; k-- > 0 && budget > 0;) {
    for (auto c : layer_chunks_[k]) {
      if (budget == 0) break;
      if (chunks.readable(c) || !chunks.placement(c).sharded) continue;
      chunks.prefetch(c);
      --budget;
    }
  }
}

void GeminiModel::on_backward_reaches(std::size_t layer) {
  auto& chunks = chunks_->chunks();
  // Backward is past every layer after `layer`: their input gradients, which are what needs the
  // weights, are computed (weight gradients need only saved activations). Chunks used by no
  // earlier layer go now, also under no_sync, where no reduce-scatter releases them.
  for (std::size_t c = 0; c < chunks.num_chunks(); ++c) {
    if (first_forward_layer_[c] > layer && chunks.placement(c).sharded) chunks.release(c);
  }
  for (auto c : layer_chunks_[layer]) chunks.fetch(c);
  prefetch_before(layer);
}

torch::Tensor GeminiModel::forward(const torch::Tensor& input) {
  try {
    return run_layers(input);
  } catch (const c10::OutOfMemoryError& e) {
    throw chunks_->out_of_memory("forward", chunks_->chunks().device(), e);
  }
}

torch::Tensor GeminiModel::run_layers(const torch::Tensor& input) {
  auto& chunks = chunks_->chunks();
  const bool grad = torch::GradMode::is_enabled();
  if (grad) {
    chunks_->prepare_for_backward();
    chunks_->begin_warmup();
  }
  chunks.release_all();  // what a backward under no_sync (or a failed pass) left gathered
  auto h = policy_.cast_to_compute(input);
  const std::size_t n = module_->size();
  for (std::size_t k = 0; k < n; ++k) {
    for (auto c : layer_chunks_[k]) chunks.fetch(c);
    prefetch_after(k);
    h = module_->layer(k)->run(h);
    if (grad && h.requires_grad()) {
      h.register_hook([this, k](const torch::Tensor&) { on_backward_reaches(k); });
    }
    // The last layer's chunks are the first backward needs: with gradients on they stay.
    if (grad && k + 1 == n) break;
    for (auto c : layer_chunks_[k]) {
      if (last_forward_layer_[c] == k) chunks.release(c);
    }
  }
  return detail::fp32_output(h);
}

std::vector<checkpoint::PendingTensor> GeminiModel::pending_full_state() const {
  return GeminiStateStreamer(*chunks_).model_entries();
}

std::vector<std::pair<std::string, torch::Tensor>> GeminiModel::full_state() const {
  std::vector<std::pair<std::string, torch::Tensor>> state;
  for (const auto& entry : pending_full_state()) state.emplace_back(entry.name, entry.values());
  return state;
}

void GeminiModel::load_full_state(const std::vector<std::pair<std::string, torch::Tensor>>& state) {
  load_full_state(CheckpointSetReader::over(state));
}

void GeminiModel::load_full_state(const CheckpointSetReader& reader) {
  check_full_state(reader.shapes());  // from the entries' shapes first: nothing changes on an error
  GeminiStateStreamer(*chunks_).load_model(reader);
}

}  // namespace colo
