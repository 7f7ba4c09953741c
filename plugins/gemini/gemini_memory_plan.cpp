// GeminiPlugin::plan_memory: what gemini would hold on each rank, from the same chunking
// (GeminiChunkOwner::plan) and placement rules the chunk owner uses.
#include <colo/amp/precision_policy.h>
#include <colo/booster/memory_plan.h>
#include <colo/zero/allocate.h>
#include <colo/zero/chunk_plan.h>
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "gemini_plugin.h"

namespace colo::plugins {
using memory_planning::bytes;
using zero::format_bytes;

MemoryPlan GeminiPlugin::plan_memory(const PluginOptions& given, const MemoryPlanInputs& in) {
  const auto o = GeminiOptions::parse(given).chunks();
  const auto compute = amp::PrecisionPolicy(o.precision()).compute_dtype();
  const auto communication = o.communication_dtype().value_or(compute);
  const int world = in.world_size();
  if (world < 1) throw std::invalid_argument(fmt::format("gemini memory plan: world size {} is not positive", world));

  // The trainable parameters in forward order, which layer each is in; frozen ones stay whole.
  std::vector<int64_t> numels;
  std::vector<std::string> names;
  std::vector<std::size_t> layer_of;
  int64_t frozen = 0;
  for (std::size_t l = 0; l < in.model.layers.size(); ++l) {
    for (const auto& p : in.model.layers[l].parameters) {
      if (!p.trainable) {
        frozen += p.numel;
        continue;
      }
      numels.push_back(p.numel);
      names.push_back(p.name);
      layer_of.push_back(l);
    }
  }
  const bool gpu = in.device_is_gpu();
  auto chunking = GeminiChunkOwner::plan(numels, names, o, gpu);
  const std::size_t num_chunks = chunking.chunks.size();
  std::vector<int64_t> shard(num_chunks);
  int64_t largest_padded = 0;
  for (std::size_t c = 0; c < num_chunks; ++c) {
    shard[c] = (chunking.chunk_numels[c] + world - 1) / world;
    largest_padded = std::max(largest_padded, shard[c] * world);
  }
  // The widest layer: the most chunks one layer's parameters lie in.
  std::map<std::size_t, std::set<std::size_t>> chunks_of_layer;
  for (std::size_t c = 0; c < num_chunks; ++c) {
    for (auto i : chunking.chunks[c]) chunks_of_layer[layer_of[i]].insert(c);
  }
  std::size_t widest = 0;
  for (const auto& [layer, set] : chunks_of_layer) widest = std::max(widest, set.size());

  // Working memory: the gathered window, reduce-scatter buffers (up to three buckets in flight),
  // the gradients kept whole under accumulation, the activations.
  std::vector<std::string> unknown;
  const int64_t gathered = static_cast<int64_t>(widest + static_cast<std::size_t>(o.max_prefetch())) *
                           bytes(largest_padded, compute);
  const int64_t reduce_buffers = 3 * (bytes(largest_padded, communication) + bytes(largest_padded / world, communication));
  const int64_t accumulated = in.keeps_gradients_between_passes() ? bytes(in.model.num_trainable(), compute) : 0;
  const int64_t activations =
      memory_planning::activation_bytes(in.model, 0, in.model.layers.size(), MemoryPlan::samples_per_pass(in, in.world_size()), o.precision(),
                                        in.activation_checkpointing(), 1, false, &unknown);
  const int64_t state_per_element = 4 * (2 + in.optimizer_states());  // master, gradient, moments

  // Parameters where the placement says; fp32 shards next to their master are the master.
  int64_t params_device = bytes(frozen, compute), params_host = 0;
  for (std::size_t c = 0; c < num_chunks; ++c) {
    const auto& pl = chunking.placement[c];
    if (!pl.sharded) {
      params_device += bytes(shard[c] * world, compute);
    } else if (!(compute == torch::kFloat && pl.params_on_host == pl.optim_on_host)) {
      (pl.params_on_host ? params_host : params_device) += bytes(shard[c], compute);
    }
  }
  // Auto: the optimizer state of each chunk, in forward order, on the device while the budget
  // allows (GeminiChunkOwner::settle_placement with the working memory estimated here).
  std::vector<std::string> notes;
  if (o.placement_policy() == GeminiPlacementPolicy::kAuto) {
    if (in.device_memory_bytes() || o.device_memory_bytes()) {
      const int64_t capacity = o.device_memory_bytes().value_or(in.device_memory_bytes().value_or(0));
      int64_t budget = static_cast<int64_t>(o.steady_cuda_cap_ratio() * static_cast<double>(capacity)) - params_device -
                       gathered - reduce_buffers - accumulated - activations;
      for (std::size_t c = 0; c < num_chunks; ++c) {
        const int64_t b = shard[c] * state_per_element;
        const bool fits = b <= budget;
        if (fits) budget -= b;
        chunking.placement[c].optim_on_host = !fits;
      }
      notes.push_back(fmt::format(
          "auto placement against {} of device memory at steady_cuda_cap_ratio {}; the run measures its working "
          "memory in the first step and may place differently",
          format_bytes(capacity), o.steady_cuda_cap_ratio()));
    } else {
      for (auto& pl : chunking.placement) pl.optim_on_host = false;
      notes.push_back("auto placement: the device's memory is not known here; optimizer state is shown on the device "
                      "(give the device's memory to plan against it)");
    }
  }
  int64_t state_device = 0, state_host = 0, largest_host_chunk = 0, largest_uploaded = 0;
  for (std::size_t c = 0; c < num_chunks; ++c) {
    const auto& pl = chunking.placement[c];
    (pl.optim_on_host ? state_host : state_device) += shard[c] * state_per_element;
    if (pl.optim_on_host) largest_host_chunk = std::max(largest_host_chunk, shard[c]);
    if (pl.optim_on_host && !pl.params_on_host) largest_uploaded = std::max(largest_uploaded, shard[c]);
  }
  int64_t staging = 0;
  if (largest_host_chunk > 0) staging += 4 * bytes(largest_host_chunk, communication);  // gradient downloads
  if (largest_uploaded > 0) staging += 4 * bytes(largest_uploaded, compute);           // parameter uploads

  RankMemory rank;
  rank.ranks = world == 1 ? "0" : fmt::format("0-{}", world - 1);
  rank.chunks = static_cast<int64_t>(num_chunks);
  rank.parts = {
      {fmt::format("parameters ({} shards{})", c10::toString(compute), frozen ? ", frozen ones whole" : ""), params_device,
       false, false},
      {fmt::format("parameters ({} shards)", c10::toString(compute)), params_host, true, false},
      {"optimizer state (fp32 master, gradient, moments)", state_device, false, false},
      {"optimizer state (fp32 master, gradient, moments)", state_host, true, false},
      {"gradients kept whole for accumulation", accumulated, false, true},
      {"buffers: gathered chunks", gathered, false, true},
      {"buffers: reduce-scatter", reduce_buffers, false, true},
      {"buffers: pinned staging", staging, true, true},
      {fmt::format("activations (batch {}{})", MemoryPlan::samples_per_pass(in, in.world_size()), in.activation_checkpointing() ? ", checkpointed" : ""),
       activations, false, true},
  };
  MemoryPlan plan;
  plan.plugin = "gemini";
  plan.options = memory_planning::options_text(given);
  plan.world_size = world;
  plan.data_parallel_size = world;
  plan.ranks.push_back(std::move(rank));
  plan.notes = std::move(notes);
  plan.notes.push_back(fmt::format("{} chunks of up to {} elements ({}); {} of {} parameters trainable", num_chunks,
                                   chunking.capacity, chunking.searched ? "searched" : "chunk_size_mb",
                                   in.model.num_trainable(), in.model.num_parameters()));
  if (!unknown.empty()) {
    plan.notes.push_back(fmt::format("no activation footprint for {} layer(s) (counted as 0), e.g. {}", unknown.size(),
                                     unknown.front()));
  }
  return plan;
}

}  // namespace colo::plugins
