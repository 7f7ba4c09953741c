// HybridParallelPlugin::plan_memory: per pipeline stage, the layers the partition gives it, each
// parameter at the share tensor parallelism leaves (the policy's rank_numels), the data-parallel
// engine of zero_stage over them, and the activations of the microbatches the schedule keeps in
// flight on that stage (pipeline::simulate).
#include <colo/booster/memory_plan.h>
#include <colo/pipeline/schedule.h>
#include <colo/pipeline/simulator.h>
#include <colo/pipeline/stage_manager.h>
#include <colo/shardformer/policy.h>
#include <colo/shardformer/policy_registry.h>
#include <colo/shardformer/shard_former.h>
#include <colo/shardformer/tp25d_grid.h>
#include <colo/shardformer/tp2d_grid.h>
#include <colo/shardformer/vit_25d_policy.h>
#include <colo/shardformer/vit_3d_policy.h>
#include <colo/shardformer/tp3d_grid.h>
#include <colo/shardformer/vit_2d_policy.h>
#include <colo/shardformer/vit_policy.h>
#include <fmt/format.h>

#include <algorithm>
#include <functional>

#include "hybrid_parallel_plugin.h"

namespace colo::plugins {
namespace {

// Ascending ranks as runs, with their count: "0-3,16-19 (8 ranks)", "0,4,8 (3 ranks)", "0-7 (8
// ranks)"; one rank alone: "5". Beyond six runs the middle ones are elided ("0,4,8,...,60 (16 ranks)").
std::string rank_list(const std::vector<int>& ranks) {
  std::vector<std::pair<int, int>> runs;
  for (int r : ranks) {
    if (!runs.empty() && runs.back().second + 1 == r) {
      runs.back().second = r;
    } else {
      runs.emplace_back(r, r);
    }
  }
  auto run_text = [](const std::pair<int, int>& run) {
    if (run.first == run.second) return std::to_string(run.first);
    if (run.second == run.first + 1) return fmt::format("{},{}", run.first, run.second);
    return fmt::format("{}-{}", run.first, run.second);
  };
  std::string text;
  const bool elided = runs.size() > 6;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    if (elided && i >= 3 && i + 1 < runs.size()) {
      if (i == 3) text += ",...";
      continue;
    }
    text += (i ? "," : "") + run_text(runs[i]);
  }
  if (ranks.size() > 1) text += fmt::format(" ({} ranks)", ranks.size());
  return text;
}

// Under 2d, what activation_bytes (counting 1/tp of every layer) leaves out of the layers that
// stay whole on every rank (the patch embedding, the head: no attention heads): the rest of their
// kept activations.
int64_t whole_layers_activations(const nn::ModelSummary& model, const pipeline::LayerRange& range, int64_t samples,
                                 c10::ScalarType dtype, int tp) {
  int64_t elements = 0;
  for (int l = range.begin; l < range.end && l < static_cast<int>(model.layers.size()); ++l) {
    const auto& layer = model.layers[static_cast<std::size_t>(l)];
    if (layer.attention_heads > 0 || layer.activations.kept < 0) continue;
    elements += layer.activations.kept - layer.activations.kept / tp;
  }
  return samples * elements * static_cast<int64_t>(c10::elementSize(dtype));
}

}  // namespace

MemoryPlan HybridParallelPlugin::plan_memory(const PluginOptions& given, const MemoryPlanInputs& in) {
  const auto o = HybridParallelOptions::parse(given);
  const int world = in.world_size();
  const int tp = o.tp_size(), pp = o.pp_size(), chunks = o.num_model_chunks();
  if (world < 1 || world % (tp * pp) != 0) {
    throw std::invalid_argument(fmt::format(
        "hybrid_parallel memory plan: tp_size {} x pp_size {} does not divide the world size {}", tp, pp, world));
  }
  const int dp = world / (tp * pp);
  MemoryPlan plan;
  plan.plugin = "hybrid_parallel";
  plan.options = memory_planning::options_text(given);
  plan.world_size = world;
  plan.data_parallel_size = dp;
  plan.pipelined = o.pipelined();

  // What one rank holds of each parameter under tensor parallelism.
  std::function<int64_t(const std::string&, int64_t)> tp_share;
  // 2d: the blocks' activations are q x q blocks (B/q samples, D/q features: 1/q² a rank), which
  // activation_bytes counts as sequence parallelism over q² ranks does; the patch embedding's and
  // the head's stay whole and are added back below. 2.5d: the same blocks of the parameters
  // (repeated over the d layers), and activations of B/(d·q) samples and D/q features: 1/tp again.
  const bool layered = o.tp_mode() == "2.5d" && tp > 1;
  const bool cube = o.tp_mode() == "3d" && tp > 1;
  const bool grid = (o.tp_mode() == "2d" || layered || cube) && tp > 1;
  if (cube) {
    // 3d: linear weights, LayerNorms and the residual-side biases 1/q³, the inner-side biases
    // 1/q; activations inside the blocks [B/q², S, D/q]: 1/tp again.
    const int64_t q = shardformer::Tp3dGrid::side_of(tp);
    try {
      shardformer::check_problems(shardformer::Vit3dSharder::plan_problems(in.model, q, o.sequence_parallel()), tp);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(fmt::format("hybrid_parallel: {}", e.what()));
    }
    tp_share = [shares = shardformer::Vit3dSharder::rank_numels(in.model, q)](const std::string& name, int64_t numel) {
      const auto it = shares.find(name);
      return it == shares.end() ? numel : it->second;
    };
    plan.notes.push_back(fmt::format("tensor parallelism 3d on a {0}x{0}x{0} cube (the blocks' linear weights, "
                                     "LayerNorms and residual-side biases 1/{1}, qkv's and fc1's biases 1/{0}; "
                                     "activations inside the blocks 1/{1})",
                                     q, tp));
  } else if (grid) {
    const int64_t depth = layered ? o.tp_depth() : 1;
    const int64_t q = layered ? shardformer::Tp25dGrid::side_and_depth_of(tp, o.tp_depth()).q
                              : shardformer::Tp2dGrid::side_of(tp);
    try {
      shardformer::check_problems(
          layered ? shardformer::Vit25dSharder::plan_problems(in.model, q, depth, o.sequence_parallel())
                  : shardformer::Vit2dSharder::plan_problems(in.model, q, o.sequence_parallel()),
          tp);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(fmt::format("hybrid_parallel: {}", e.what()));
    }
    tp_share = [shares = shardformer::Vit2dSharder::rank_numels(in.model, q)](const std::string& name, int64_t numel) {
      const auto it = shares.find(name);
      return it == shares.end() ? numel : it->second;
    };
    if (layered) {
      plan.notes.push_back(fmt::format("tensor parallelism 2.5d on {2} layers of a {0}x{0} grid (the blocks' linear "
                                       "weights 1/{1}, their biases and LayerNorms 1/{0}, the same on every layer; "
                                       "activations inside the blocks 1/{3})",
                                       q, q * q, depth, tp));
    } else {
      plan.notes.push_back(fmt::format("tensor parallelism 2d on a {0}x{0} grid (the blocks' linear weights 1/{1}, "
                                       "their biases and LayerNorms 1/{0}, activations inside the blocks 1/{1})",
                                       q, q * q));
    }
  } else if (tp > 1) {
    // As ShardFormer looks them up: the program's own first, colo's ViT policy last.
    auto policies = shardformer::PolicyRegistry::global().policies();
    policies.push_back(std::make_shared<shardformer::VitPolicy>());
    for (const auto& policy : policies) {
      if (!policy->knows(in.model)) continue;
      // What boost's ShardFormer::shard refuses (heads or hidden units that do not divide over
      // tp_size, ...), in the same words: a plan is no promise the run cannot keep.
      try {
        shardformer::check_problems(policy->plan_problems(in.model, tp, o.sequence_parallel()), tp);
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(fmt::format("hybrid_parallel: {}", e.what()));
      }
      tp_share = [shares = policy->rank_numels(in.model, tp)](const std::string& name, int64_t numel) {
        const auto it = shares.find(name);
        return it == shares.end() ? numel : it->second;
      };
      plan.notes.push_back(fmt::format("tensor parallelism by the '{}' policy", policy->name()));
      break;
    }
    if (!tp_share) {
      throw std::invalid_argument(
          "hybrid_parallel memory plan: no shardformer policy knows this model, so tp_size > 1 cannot be planned "
          "(a policy's table describes its split: docs/adding_a_model_policy.md)");
    }
  }
  std::vector<double> costs;
  for (const auto& layer : in.model.layers) {
    double count = 0;
    for (const auto& p : layer.parameters) count += static_cast<double>(tp_share ? tp_share(p.name, p.numel) : p.numel);
    costs.push_back(count);
  }
  const auto ranges = partition(costs, o, pp * chunks);

  // Microbatches: what execute_pipeline cuts the per-rank batch into, through the same function.
  const int64_t share = MemoryPlan::samples_per_pass(in, dp);
  int64_t microbatches = 1, samples = share;
  if (o.pipelined()) {
    microbatches = microbatches_for(o, share, /*forward_only=*/false);
    samples = share / microbatches;
  }
  std::vector<int> held(pp, 1);
  if (o.pipelined()) {
    const auto schedule = o.training_schedule(static_cast<int>(microbatches));
    const auto simulated = pipeline::simulate(schedule);
    for (int r = 0; r < pp; ++r) held[r] = std::max(1, simulated.ranks[r].peak_unfinished);
  }

  const auto compute = amp::to_dtype(o.precision());
  std::vector<std::string> unknown;
  for (int r = 0; r < pp; ++r) {
    const pipeline::StageManager stages(pp, r, chunks);
    memory_planning::RankParameters stage_params;  // every chunk's, in the stack's order
    std::vector<int64_t>& trainable = stage_params.trainable;
    int64_t& frozen = stage_params.frozen;
    int64_t activations = 0;
    for (int c = 0; c < chunks; ++c) {
      const auto& range = ranges[stages.stage(c)];
      auto params = memory_planning::rank_parameters(in.model, range.begin, range.end, tp_share);
      trainable.insert(trainable.end(), params.trainable.begin(), params.trainable.end());
      stage_params.layer_of.insert(stage_params.layer_of.end(), params.layer_of.begin(), params.layer_of.end());
      stage_params.names.insert(stage_params.names.end(), params.names.begin(), params.names.end());
      frozen += params.frozen;
      activations += memory_planning::activation_bytes(in.model, range.begin, range.end, samples, o.precision(),
                                                       in.activation_checkpointing(), tp, grid || o.sequence_parallel(),
                                                       r == 0 && c == 0 ? &unknown : nullptr);
      if (grid) activations += whole_layers_activations(in.model, range, samples, compute, tp);
    }
    // A microbatch in flight holds one chunk's activations: held counts chunks' worth.
    activations = activations * held[r] / chunks;
    RankMemory rank;
    std::vector<int> ranks;
    for (int d = 0; d < dp; ++d) {
      for (int t = 0; t < tp; ++t) ranks.push_back((d * pp + r) * tp + t);  // the mesh's order: tp innermost
    }
    rank.ranks = rank_list(ranks);
    rank.position = fmt::format("pp {} of {}; dp {} x tp {} alike", r, pp, dp, tp);
    if (o.zero_stage() == 0) {
      memory_planning::ReplicatedEngine engine;
      engine.precision = o.precision();
      engine.bucket_cap_mb = o.bucket_cap_mb();
      engine.communication_dtype = o.communication_dtype();
      engine.optimizer_states = in.optimizer_states();
      rank.parts = memory_planning::replicated_engine_parts(trainable, frozen, engine);
    } else if (o.zero_stage() == 3) {
      memory_planning::ChunkedEngine engine;
      engine.precision = o.precision();
      engine.cpu_offload = o.cpu_offload();
      engine.communication_dtype = o.communication_dtype();
      engine.dp = dp;
      engine.optimizer_states = in.optimizer_states();
      engine.device_is_gpu = in.device_is_gpu();
      engine.pipelined = o.pipelined();
      engine.chunk_size_mb = o.chunk_size_mb();
      rank.parts = memory_planning::chunked_engine_parts(stage_params, engine, &rank.chunks);
    } else {
      memory_planning::ZeroEngine engine;
      engine.stage = o.zero_stage();
      engine.precision = o.precision();
      engine.bucket_cap_mb = o.bucket_cap_mb();
      engine.cpu_offload = o.cpu_offload();
      engine.communication_dtype = o.communication_dtype();
      engine.dp = dp;
      engine.optimizer_states = in.optimizer_states();
      engine.device_is_gpu = in.device_is_gpu();
      rank.parts = memory_planning::zero_engine_parts(trainable, frozen, engine);
    }
    rank.parts.push_back({fmt::format("activations ({} microbatch{} of {} in flight{})", held[r],
                                      held[r] == 1 ? "" : "es", samples,
                                      in.activation_checkpointing() ? ", checkpointed" : ""),
                          activations, false, true});
    plan.ranks.push_back(std::move(rank));
  }
  plan.notes.push_back(fmt::format("mesh dp {} x pp {} x tp {}; {} microbatch{} of {} sample{} per step", dp, pp, tp,
                                   microbatches, microbatches == 1 ? "" : "es", samples, samples == 1 ? "" : "s"));
  if (!unknown.empty()) {
    plan.notes.push_back(fmt::format("no activation footprint for {} layer(s) (counted as 0), e.g. {}", unknown.size(),
                                     unknown.front()));
  }
  return plan;
}

}  // namespace colo::plugins
