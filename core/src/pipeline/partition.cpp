#include <colo/pipeline/partition.h>
#include <fmt/format.h>

#include <array>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

namespace colo::pipeline {
namespace {

constexpr std::array<PartitionMethod, 3> kMethods = {PartitionMethod::kUniform, PartitionMethod::kBalanced,
                                                     PartitionMethod::kExplicit};

// Stage sizes: `units` layers over `stages` stages, the remainder on the middle stages.
std::vector<int> uniform_sizes(int units, int stages) {
  std::vector<int> sizes(stages, units / stages);
  const int remainder = units % stages;
  const int first = stages / 2 - remainder / 2;
  for (int s = first; s < first + remainder; ++s) ++sizes[s];
  return sizes;
}

// Stage sizes minimising the largest stage cost, then the sum of squared stage costs.
std::vector<int> balanced_sizes(const std::vector<double>& costs, int stages) {
  const int units = static_cast<int>(costs.size());
  std::vector<double> prefix(units + 1, 0.0);
  for (int u = 0; u < units; ++u) prefix[u + 1] = prefix[u] + costs[u];
  const auto cost = [&](int begin, int end) { return prefix[end] - prefix[begin]; };
  constexpr double kInf = std::numeric_limits<double>::infinity();

  // best[s][u]: the smallest largest-stage cost of placing units [0, u) on stages [0, s).
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(units + 1, kInf));
  best[0][0] = 0;
  for (int s = 1; s <= stages; ++s) {
    for (int u = s; u <= units - (stages - s); ++u) {
      for (int j = s - 1; j < u; ++j) best[s][u] = std::min(best[s][u], std::max(best[s - 1][j], cost(j, u)));
    }
  }
  const double bound = best[stages][units];
  const double tolerance = 1e-9 * std::max(1.0, bound);

  // Among partitions within that bound, the least sum of squared stage costs, then of squared
  // stage sizes (equal costs, zeros included, are spread evenly); cut[s][u]: where stage s - 1
  // starts.
  struct Evenness {
    double cost_squares = kInf;
    long long size_squares = 0;
  };
  const auto better = [&](const Evenness& a, const Evenness& b) {
    if (a.cost_squares < b.cost_squares - tolerance * std::max(1.0, bound)) return true;
    if (a.cost_squares > b.cost_squares + tolerance * std::max(1.0, bound)) return false;
    return a.size_squares < b.size_squares;
  };
  std::vector<std::vector<Evenness>> even(stages + 1, std::vector<Evenness>(units + 1));
  std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(units + 1, -1));
  even[0][0] = {0.0, 0};
  for (int s = 1; s <= stages; ++s) {
    for (int u = s; u <= units - (stages - s); ++u) {
      for (int j = s - 1; j < u; ++j) {
        const double c = cost(j, u);
        if (c > bound + tolerance || even[s - 1][j].cost_squares == kInf) continue;
        const Evenness candidate{even[s - 1][j].cost_squares + c * c,
                                 even[s - 1][j].size_squares + static_cast<long long>(u - j) * (u - j)};
        if (better(candidate, even[s][u])) {
          even[s][u] = candidate;
          cut[s][u] = j;
        }
      }
    }
  }
  std::vector<int> sizes(stages);
  for (int s = stages, u = units; s > 0; --s) {
    sizes[s - 1] = u - cut[s][u];
    u = cut[s][u];
  }
  return sizes;
}

}  // namespace

std::string to_string(PartitionMethod method) {
  switch (method) {
    case PartitionMethod::kUniform:
      return "uniform";
    case PartitionMethod::kBalanced:
      return "balanced";
    case PartitionMethod::kExplicit:
      return "explicit";
  }
  throw std::logic_error("to_string: unknown PartitionMethod");
}

PartitionMethod parse_partition_method(std::string_view name) {
  std::string valid;
  for (auto method : kMethods) {
    if (name == to_string(method)) return method;
    valid += (valid.empty() ? "" : ", ") + to_string(method);
  }
  throw std::invalid_argument(fmt::format("unknown layer partition method '{}': use one of {}", name, valid));
}

std::string LayerRange::str() const { return fmt::format("[{}, {})", begin, end); }

std::vector<LayerRange> partition_layers(int num_layers, int num_stages, const PartitionOptions& options) {
  const auto fail = [&](const std::string& why) {
    throw std::invalid_argument(fmt::format("cannot partition {} layers into {} pipeline stages ({}): {}", num_layers,
                                            num_stages, to_string(options.method()), why));
  };
  if (num_stages < 1) fail("the number of stages (pp × chunks) must be at least 1");
  const int glue = options.glue_last();
  if (glue < 0 || glue >= std::max(num_layers, 1)) {
    fail(fmt::format("glue_last must be in [0, {}) (it glues the stack's last layers to the one before them), got {}",
                     std::max(num_layers, 1), glue));
  }
  const int lead = options.glue_first();
  if (lead < 0 || lead >= std::max(num_layers - glue, 1)) {
    fail(fmt::format("glue_first must be in [0, {}) (it glues the stack's first layers to the one after them, and "
                     "glue_last {} takes the last ones), got {}",
                     std::max(num_layers - glue, 1), glue, lead));
  }
  const int units = num_layers - glue - lead;  // what is placed, the glued layers counting as one
  // Layers are counted one way in every message (num_layers, the stack's); the glued ones are
  // said to stay together, which is why they fill fewer stages than there are layers.
  std::string glued;
  if (lead > 0) glued += fmt::format("the first {} stay on one stage", lead + 1);
  if (glue > 0) glued += fmt::format("{}the last {} stay on one stage", glued.empty() ? "" : ", ", glue + 1);
  if (!glued.empty()) glued = " (" + glued + ")";
  if (units < num_stages) {
    fail(fmt::format("every stage needs at least one layer, and the {} layers fill at most {} stage{}{}; lower pp or "
                     "chunks, or use a model with more layers",
                     num_layers, units, units == 1 ? "" : "s", glued));
  }
  const bool balanced = options.method() == PartitionMethod::kBalanced;
  const bool explicit_sizes = options.method() == PartitionMethod::kExplicit;
  if (!balanced && !options.layer_costs().empty()) {
    fail("layer_costs is set, but only the balanced method reads it: use method balanced or drop the costs");
  }
  if (!explicit_sizes && !options.layers_per_stage().empty()) {
    fail("layers_per_stage is set, but only the explicit method reads it: use method explicit or drop the list");
  }

  std::vector<int> sizes;
  switch (options.method()) {
    case PartitionMethod::kUniform:
      sizes = uniform_sizes(units, num_stages);
      break;
    case PartitionMethod::kBalanced: {
      const auto& costs = options.layer_costs();
      if (costs.size() != static_cast<std::size_t>(num_layers)) {
        fail(fmt::format("layer_costs has {} entries: give one cost per layer of the stack ({})", costs.size(),
                         num_layers));
      }
      for (std::size_t i = 0; i < costs.size(); ++i) {
        if (!std::isfinite(costs[i]) || costs[i] < 0) {
          fail(fmt::format("layer {}'s cost is {}: costs must be finite and >= 0", i, costs[i]));
        }
      }
      std::vector<double> unit_costs(costs.begin() + lead, costs.begin() + lead + units);
      unit_costs.front() = std::accumulate(costs.begin(), costs.begin() + lead + 1, 0.0);
      unit_costs.back() = std::accumulate(costs.begin() + lead + units - 1, costs.end(), 0.0);
      if (units == 1) unit_costs.front() = std::accumulate(costs.begin(), costs.end(), 0.0);
      sizes = balanced_sizes(unit_costs, num_stages);
      break;
    }
    case PartitionMethod::kExplicit: {
      sizes = options.layers_per_stage();
      if (sizes.size() != static_cast<std::size_t>(num_stages)) {
        fail(fmt::format("layers_per_stage has {} entries: give one per virtual stage (pp × chunks = {})", sizes.size(),
                         num_stages));
      }
      long long sum = 0;
      for (std::size_t s = 0; s < sizes.size(); ++s) {
        if (sizes[s] < 1) {
          fail(fmt::format("layers_per_stage gives stage {} {} layers: every stage needs at least one", s, sizes[s]));
        }
        sum += sizes[s];
      }
      if (sum != units) {
        fail(glue + lead > 0 ? fmt::format("layers_per_stage sums to {}, but the {} layers count as {}{}: give counts "
                                           "summing to {}",
                                           sum, num_layers, units, glued, units)
                      : fmt::format("layers_per_stage sums to {}, but there are {} layers", sum, num_layers));
      }
      break;
    }
  }

  std::vector<LayerRange> ranges;
  int begin = lead;  // the first unit stands for the first glue_first + 1 layers
  for (int size : sizes) {
    ranges.push_back({begin, begin + size});
    begin += size;
  }
  ranges.front().begin = 0;
  ranges.back().end = num_layers;  // the glued layers go with the last unit
  return ranges;
}

PartitionOptions stack_partition_options(PartitionMethod method, int num_layers, int num_stages) {
  PartitionOptions options;
  options.method(method).glue_last(num_layers > 1 ? 1 : 0);
  const int blocks = num_layers - 2;  // without the input and the output layer
  if (method == PartitionMethod::kUniform && blocks >= std::max(num_stages, 1)) options.glue_first(1);
  return options;
}

}  // namespace colo::pipeline
