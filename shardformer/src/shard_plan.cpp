#include <colo/nn/layer.h>
#include <colo/nn/model_summary.h>
#include <colo/shardformer/shard_plan.h>
#include <fmt/format.h>

#include <algorithm>
#include <set>

namespace colo::shardformer {
namespace {

const nn::ParameterSummary* find_local(const nn::LayerSummary& layer, const std::string& local) {
  for (const auto& p : layer.parameters) {
    if (local_name(layer, p.name) == local) return &p;
  }
  return nullptr;
}

bool holds_matrix(const nn::LayerSummary& layer, const std::string& local) {
  const auto* p = find_local(layer, local);
  return p && p->shape.size() == 2;
}

int64_t parts_of(const SubModuleSplit& split) {
  return split.kind == Split::kFusedQkv ? 3 : split.kind == Split::kColumn ? split.options.parts() : 1;
}

}  // namespace

const char* to_string(Split kind) {
  switch (kind) {
    case Split::kColumn:
      return "Column";
    case Split::kRow:
      return "Row";
    case Split::kFusedQkv:
      return "FusedQkv";
  }
  return "?";
}

std::vector<std::string> split_parameter_names(const SubModuleSplit& split) {
  if (split.kind == Split::kRow) return {split.suffix + ".weight"};
  return {split.suffix + ".weight", split.suffix + ".bias"};
}

const LayerPlan* plan_of(const ShardPlan& plan, const nn::Layer& layer) {
  for (const auto& entry : plan) {
    if (entry.is_a && entry.is_a(layer)) return &entry;
  }
  return nullptr;
}

const LayerPlan* plan_of(const ShardPlan& plan, const nn::LayerSummary& layer) {
  for (const auto& entry : plan) {
    if (entry.splits.empty()) continue;
    const bool all = std::all_of(entry.splits.begin(), entry.splits.end(),
                                 [&](const SubModuleSplit& s) { return holds_matrix(layer, s.suffix + ".weight"); });
    if (all) return &entry;
  }
  return nullptr;
}

std::string local_name(const nn::LayerSummary& layer, const std::string& canonical) {
  // A layer without a canonical prefix is summarised as "layer <k>" and its names are local.
  const std::string prefix = layer.name + ".";
  if (canonical.compare(0, prefix.size(), prefix) == 0) return canonical.substr(prefix.size());
  return canonical;
}

std::map<std::string, int64_t> rank_numels(const ShardPlan& plan, const nn::ModelSummary& model, int64_t tp_size) {
  std::map<std::string, int64_t> numels;
  for (const auto& layer : model.layers) {
    std::set<std::string> split;
    if (const auto* entry = plan_of(plan, layer)) {
      for (const auto& row : entry->splits) {
        for (auto& name : split_parameter_names(row)) split.insert(std::move(name));
      }
    }
    for (const auto& p : layer.parameters) {
      numels[p.name] = split.count(local_name(layer, p.name)) ? p.numel / tp_size : p.numel;
    }
  }
  return numels;
}

std::vector<std::string> shape_problems(const LayerPlan& layer_plan, const nn::LayerSummary& layer,
                                        int64_t tp_size) {
  std::vector<std::string> found;
  for (const auto& row : layer_plan.splits) {
    const auto* weight = find_local(layer, row.suffix + ".weight");
    if (!weight || weight->shape.size() != 2) continue;
    const int64_t parts = parts_of(row);
    const bool column = row.kind != Split::kRow;
    const int64_t features = weight->shape[column ? 0 : 1];
    if (features % parts == 0 && (features / parts) % tp_size == 0) continue;
    found.push_back(fmt::format(
        "{}'s {} ({} split) has {} {} features{}, which do not divide over tp_size={}: use a tp_size that divides {}",
        layer.name, row.suffix, to_string(row.kind), features, column ? "output" : "input",
        parts > 1 ? fmt::format(" in {} parts", parts) : "", tp_size, parts > 1 ? features / parts : features));
  }
  return found;
}

std::vector<std::string> shape_problems(const ShardPlan& plan, const nn::ModelSummary& model, int64_t tp_size) {
  std::vector<std::string> found;
  std::set<const LayerPlan*> reported;
  for (const auto& layer : model.layers) {
    const auto* entry = plan_of(plan, layer);
    if (!entry || reported.count(entry)) continue;
    auto problems = shape_problems(*entry, layer, tp_size);
    if (problems.empty()) continue;
    reported.insert(entry);
    found.insert(found.end(), problems.begin(), problems.end());
  }
  return found;
}

}  // namespace colo::shardformer
