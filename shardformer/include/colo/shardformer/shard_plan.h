#pragma once

// A policy's table: which sub-modules of which layer types become which parallel linear
// (Colossal-AI's ModulePolicyDescription / SubModuleReplacementDescription, torchtitan's
// per-block plan {"attention.wq": ColwiseParallel(), ...}). ShardFormer executes it on a model;
// memory plans read it from a ModelSummary. Both go through the functions below, so that what a
// plan counts is what sharding holds.
#include <colo/shardformer/parallel_linear.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace colo::nn {
class Layer;
struct LayerSummary;
struct ModelSummary;
}  // namespace colo::nn

namespace colo::shardformer {

// How a linear sub-module (weight [out, in], bias optional) is split over the tensor-parallel ranks.
enum class Split {
  kColumn,    // ColumnParallelLinear: weight rows and bias split; each rank computes its outputs' share
  kRow,       // RowParallelLinear: weight columns split, partial products summed; the bias stays whole
  kFusedQkv,  // kColumn over [q; k; v], each part split on its own (parts 3): each rank keeps whole heads
};
const char* to_string(Split kind);

// One row of the table: the sub-module at `suffix` (its path inside the layer, "attn.qkv") is
// replaced by the parallel linear `kind` names, built from the sub-module's own weight and bias.
struct SubModuleSplit {
  std::string suffix;
  Split kind = Split::kColumn;
  // gather_output, and `parts` for a kColumn of several blocks; ShardFormer sets `parts` of a
  // kFusedQkv (3) and `sequence_tokens` (under sequence parallelism).
  ParallelLinearOptions options = {};
};

// The local names of the parameters `split` cuts over tp: `<suffix>.weight`, and `<suffix>.bias`
// for a column split (a row split adds its bias whole, after the sum).
std::vector<std::string> split_parameter_names(const SubModuleSplit& split);

// The rows for one layer type. Layers of types no LayerPlan names stay whole.
struct LayerPlan {
  std::string layer_type;                     // for messages: "EncoderBlock"
  std::function<bool(const nn::Layer&)> is_a;  // whether a layer of a model is of this type
  std::vector<SubModuleSplit> splits;
};

// The LayerPlan for layers of C++ type L.
template <class L>
LayerPlan layer_plan(std::string layer_type, std::vector<SubModuleSplit> splits) {
  return {std::move(layer_type), [](const nn::Layer& layer) { return dynamic_cast<const L*>(&layer) != nullptr; },
          std::move(splits)};
}

// A policy's whole table.
using ShardPlan = std::vector<LayerPlan>;

// The LayerPlan of a layer of a model (by type), or null.
const LayerPlan* plan_of(const ShardPlan& plan, const nn::Layer& layer);
// The LayerPlan of a layer of a summary, which has no types: the first whose every row's
// `<suffix>.weight` the layer holds as a matrix, or null.
const LayerPlan* plan_of(const ShardPlan& plan, const nn::LayerSummary& layer);

// The name a parameter of `layer` has inside the layer ("blocks.3.attn.qkv.weight" of layer
// "blocks.3" is "attn.qkv.weight").
std::string local_name(const nn::LayerSummary& layer, const std::string& canonical);

// How many elements one rank holds of each parameter of `model` (canonical names) once `plan` is
// applied over tp_size ranks: a split parameter's 1/tp_size, a whole one's all.
std::map<std::string, int64_t> rank_numels(const ShardPlan& plan, const nn::ModelSummary& model, int64_t tp_size);

// The rows of `layer_plan` whose split does not divide over tp_size on `layer` (a kColumn's output
// features, per part; a kRow's input features), each naming the layer, the sub-module and the
// sizes. Rows whose weight the layer lacks are not this function's to report.
std::vector<std::string> shape_problems(const LayerPlan& layer_plan, const nn::LayerSummary& layer,
                                        int64_t tp_size);
// shape_problems of the first layer of each type that has any, over a summary.
std::vector<std::string> shape_problems(const ShardPlan& plan, const nn::ModelSummary& model, int64_t tp_size);

}  // namespace colo::shardformer
