#include <colo/zero/chunk_plan.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace colo::zero {
namespace {

std::vector<std::vector<std::size_t>> pack(const std::vector<int64_t>& numels, int64_t capacity) {
  std::vector<std::vector<std::size_t>> chunks;
  int64_t used = 0;
  for (std::size_t i = 0; i < numels.size(); ++i) {
    if (chunks.empty() || used + numels[i] > capacity) {
      chunks.emplace_back();
      used = 0;
    }
    chunks.back().push_back(i);
    used += numels[i];
  }
  return chunks;
}

int64_t waste(const std::vector<std::vector<std::size_t>>& chunks, const std::vector<int64_t>& numels, int64_t capacity) {
  const int64_t total = std::accumulate(numels.begin(), numels.end(), int64_t{0});
  return capacity * static_cast<int64_t>(chunks.size()) - total;
}

std::string mib(int64_t bytes) { return fmt::format("{:.2f} MiB", static_cast<double>(bytes) / (1024.0 * 1024.0)); }

// How many of the first chunks hold nearest to `fraction` of the elements.
std::size_t leading_chunks(const std::vector<int64_t>& numels, double fraction) {
  const double total = static_cast<double>(std::accumulate(numels.begin(), numels.end(), int64_t{0}));
  const double target = fraction * total;
  std::size_t best = 0;
  double best_distance = target;
  double sum = 0.0;
  for (std::size_t k = 1; k <= numels.size(); ++k) {
    sum += static_cast<double>(numels[k - 1]);
    const double distance = std::abs(sum - target);
    if (distance < best_distance) {
      best = k;
      best_distance = distance;
    }
  }
  return best;
}

}  // namespace

ChunkPlan plan_chunks(const std::vector<int64_t>& numels, const std::vector<std::string>& names,
                      std::optional<int64_t> capacity, int64_t element_size) {
  if (names.size() != numels.size()) throw std::invalid_argument("plan_chunks: one name per parameter");
  ChunkPlan plan;
  if (numels.empty()) return plan;
  const auto largest = std::max_element(numels.begin(), numels.end());
  const std::size_t largest_index = static_cast<std::size_t>(largest - numels.begin());
  if (capacity) {
    if (*capacity < *largest) {
      throw std::invalid_argument(fmt::format(
          "a chunk of {} elements ({}) cannot hold parameter '{}' of {} elements ({}): parameters are not split "
          "across chunks; set chunk_size_mb to at least {:.2f}, or leave it unset to search",
          *capacity, mib(*capacity * element_size), names[largest_index], *largest, mib(*largest * element_size),
          std::ceil(static_cast<double>(*largest * element_size) / (1024.0 * 1024.0) * 100.0) / 100.0));
    }
    plan.capacity = *capacity;
    plan.chunks = pack(numels, plan.capacity);
    plan.wasted = waste(plan.chunks, numels, plan.capacity);
    return plan;
  }
  plan.searched = true;
  const int64_t base = std::max<int64_t>(1, *largest);
  for (int step = 0; step <= 24; ++step) {
    const int64_t candidate = base + base * step / 8;
    auto chunks = pack(numels, candidate);
    const int64_t wasted = waste(chunks, numels, candidate);
    if (plan.chunks.empty() || wasted <= plan.wasted) {
      plan.capacity = candidate;
      plan.chunks = std::move(chunks);
      plan.wasted = wasted;
    }
  }
  return plan;
}

std::vector<ChunkPlacement> static_placement(const std::vector<int64_t>& chunk_numels, double shard_param_frac,
                                             double offload_param_frac, double offload_optim_frac) {
  std::vector<std::string> errors;
  const auto in_unit = [&](const char* name, double value) {
    if (!(value >= 0.0 && value <= 1.0)) errors.push_back(fmt::format("{} must lie in [0, 1], got {}", name, value));
  };
  in_unit("shard_param_frac", shard_param_frac);
  in_unit("offload_param_frac", offload_param_frac);
  in_unit("offload_optim_frac", offload_optim_frac);
  if (offload_param_frac > 0.0 && shard_param_frac < 1.0) {
    errors.push_back(fmt::format(
        "offload_param_frac={} needs shard_param_frac=1 (got {}): only sharded chunks keep a shard that can live "
        "in host memory",
        offload_param_frac, shard_param_frac));
  }
  if (!errors.empty()) throw std::invalid_argument(fmt::format("{}", fmt::join(errors, "; ")));
  const auto sharded = shard_param_frac >= 1.0 ? chunk_numels.size() : leading_chunks(chunk_numels, shard_param_frac);
  const auto params_off = leading_chunks(chunk_numels, offload_param_frac);
  const auto optim_off = leading_chunks(chunk_numels, offload_optim_frac);
  std::vector<ChunkPlacement> placement(chunk_numels.size());
  for (std::size_t c = 0; c < placement.size(); ++c) {
    placement[c].sharded = c < sharded;
    placement[c].params_on_host = c < params_off;
    placement[c].optim_on_host = c < optim_off;
  }
  return placement;
}

}  // namespace colo::zero
