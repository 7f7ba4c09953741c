#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace colo::zero {

// How gemini (ZeRO-3) packs parameters into chunks: consecutive parameters in forward order,
// greedily, each chunk holding at most `capacity` elements. A chunk is the unit of everything
// after it: one all-gather brings its parameters, one reduce-scatter takes its gradients, one
// placement decision puts its shard and optimizer state on the GPU or in host memory.
//
// Parameters are never split across chunks, so the capacity must hold the largest parameter.
// Unset, it is searched: among capacities from the largest parameter up to four times it, the
// one wasting the fewest elements at the ends of chunks (ties: the larger, fewer collectives).
struct ChunkPlan {
  int64_t capacity = 0;   // elements a chunk may hold
  bool searched = false;  // the capacity was chosen by the search
  std::vector<std::vector<std::size_t>> chunks;  // parameter indices per chunk, in forward order
  int64_t wasted = 0;     // capacity * chunks - total elements
};

// `numels` and `names`: the parameters in forward order. `capacity`: elements per chunk, or
// nullopt to search. Throws std::invalid_argument, naming the parameter and the size that would
// do, when a given capacity is smaller than a parameter.
ChunkPlan plan_chunks(const std::vector<int64_t>& numels, const std::vector<std::string>& names,
                      std::optional<int64_t> capacity, int64_t element_size);

// Where one chunk's state lives (Colossal-AI's static placement).
struct ChunkPlacement {
  // The working parameters are sharded over the data-parallel ranks, gathered before use and
  // released after (ZeRO-3); false: kept gathered on every rank (ZeRO-2 for this chunk).
  bool sharded = true;
  // This rank's shard of the working parameters lives in host memory (sharded chunks only).
  bool params_on_host = false;
  // The fp32 master shard, gradient shard and Adam moments live in host memory and the chunk's
  // step runs on the CPU.
  bool optim_on_host = false;
};

// The static placement of chunks of the given sizes: the first chunks in forward order are
// sharded, parameter-offloaded and optimizer-offloaded until each fraction of the elements is
// reached (the number of chunks whose elements come nearest to fraction × total). Fractions
// must lie in [0, 1]; offload_param_frac > 0 needs shard_param_frac = 1 (a replicated chunk
// keeps no shard to offload). Throws std::invalid_argument listing every violated rule.
std::vector<ChunkPlacement> static_placement(const std::vector<int64_t>& chunk_numels, double shard_param_frac,
                                             double offload_param_frac, double offload_optim_frac);

}  // namespace colo::zero
