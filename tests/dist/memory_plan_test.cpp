// Booster::plan_memory against what the plugins hold: for each plugin and layout, the plan's
// figures for model state (parameters, gradient buckets, optimizer state) equal the bytes of the
// tensors a boosted model holds after a training step, counted from those tensors. Activations
// and working buffers are estimates, not checked here (the GPU runs report them beside the
// measured peaks: benchmarks/RESULTS.md).
#include <colo/booster/booster.h>
#include <colo/engine/gemini_chunk_owner.h>
#include <colo/engine/gemini_model.h>
#include <colo/engine/gemini_optimizer.h>
#include <colo/booster/memory_plan.h>
#include <colo/engine/mixed_precision_optimizer.h>
#include <colo/booster/plugin_registry.h>
#include <colo/engine/zero_optimizer.h>
#include <colo/amp/master_weights.h>
#include <colo/dist/process_group.h>
#include <colo/dist/process_group_mesh.h>
#include <colo/nn/model_summary.h>
#include <colo/nn/vision_transformer.h>
#include <colo/zero/chunked_parameters.h>
#include <colo/zero/shard_layout.h>
#include <colo/zero/sharded_adam.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>
#include <string>

#include "dist_test_env.h"
#include "plugin_equivalence.h"

namespace colo {
namespace {

using namespace test;

constexpr int64_t kPerRank = 4;

// Bytes of the distinct storages of `tensors` (views of one buffer count once).
int64_t storage_bytes(const std::vector<torch::Tensor>& tensors) {
  std::set<const void*> seen;
  int64_t bytes = 0;
  for (const auto& t : tensors) {
    if (!t.defined()) continue;
    if (seen.insert(t.storage().unsafeGetStorageImpl()).second) bytes += static_cast<int64_t>(t.storage().nbytes());
  }
  return bytes;
}

MemoryPlanInputs inputs_for(const nn::LayerStack& model, int world) {
  MemoryPlanInputs in;
  in.model = nn::summarize(model);
  in.world_size(world).global_batch_size(kPerRank * world).device_is_gpu(device().is_cuda());
  return in;
}

// Boosts a fresh tiny ViT and runs one step.
Boosted boost_and_step(const std::string& name, const PluginOptions& options) {
  auto plugin = PluginRegistry::global().create(name, options, PluginContext{world(), device()});
  Booster booster(plugin);
  auto model = make_vit();
  auto optimizer = std::make_shared<torch::optim::AdamW>(model->parameters(), torch::optim::AdamWOptions(1e-3));
  auto b = booster.boost(model, optimizer, cross_entropy);
  const auto data = make_batches(1, kPerRank * world()->size());
  b.optimizer->zero_grad();
  if (plugin->supports_pipeline()) {
    const auto dp = b.mesh->group(dist::MeshAxis::kDp);
    booster.execute_pipeline(shard(data.images[0], dp->rank(), dp->size()), shard(data.labels[0], dp->rank(), dp->size()),
                             *b.model, b.criterion, *b.optimizer);
  } else {
    auto loss = b.criterion(b.model->forward(shard(data.images[0])), shard(data.labels[0]));
    booster.backward(loss, *b.optimizer);
  }
  EXPECT_TRUE(b.optimizer->step());
  return b;
}

std::vector<torch::Tensor> params_of(const nn::LayerStack& model) {
  std::vector<torch::Tensor> out;
  for (const auto& p : model.parameters()) out.push_back(p);
  return out;
}

std::vector<torch::Tensor> grads_of(const nn::LayerStack& model) {
  std::vector<torch::Tensor> out;
  for (const auto& p : model.parameters()) out.push_back(p.grad());
  return out;
}

int64_t optimizer_state_bytes(const torch::optim::Optimizer& optimizer) {
  std::vector<torch::Tensor> tensors;
  for (const auto& [key, state] : optimizer.state()) {
    if (auto* adamw = dynamic_cast<const torch::optim::AdamWParamState*>(state.get())) {
      tensors.push_back(adamw->exp_avg());
      tensors.push_back(adamw->exp_avg_sq());
    }
  }
  return storage_bytes(tensors);
}

TEST(MemoryPlan, TorchDdpHoldsWhatItPlans) {
  for (const char* precision : {"fp32", "bf16"}) {
    SCOPED_TRACE(precision);
    const PluginOptions options{{"precision", precision}};
    const auto plan = Booster::plan_memory("torch_ddp", options, inputs_for(*make_vit(), world()->size()));
    ASSERT_EQ(plan.ranks.size(), 1u);
    const auto& r = plan.ranks.front();
    auto b = boost_and_step("torch_ddp", options);
    auto& model = b.model->module();
    EXPECT_EQ(r.bytes_of("parameters"), storage_bytes(params_of(model)));
    EXPECT_EQ(r.bytes_of("gradients"), storage_bytes(grads_of(model)));
    auto& mp = dynamic_cast<MixedPrecisionOptimizer&>(*b.optimizer);
    int64_t masters = 0;
    if (mp.master_weights()) {
      std::vector<torch::Tensor> tensors;
      for (const auto& m : mp.master_weights()->master_params()) {
        tensors.push_back(m);
        tensors.push_back(m.grad());
      }
      masters = storage_bytes(tensors);
    }
    EXPECT_EQ(r.bytes_of("optimizer state: fp32 masters"), masters);
    EXPECT_EQ(r.bytes_of("optimizer state: moments"), optimizer_state_bytes(b.optimizer->optimizer()));
  }
}

TEST(MemoryPlan, LowLevelZeroHoldsWhatItPlans) {
  for (const char* stage : {"1", "2"}) {
    SCOPED_TRACE(fmt::format("stage {}", stage));
    const PluginOptions options{{"precision", "bf16"}, {"stage", stage}, {"reduce_bucket_size_mb", "0.01"}};
    const auto plan = Booster::plan_memory("low_level_zero", options, inputs_for(*make_vit(), world()->size()));
    const auto& r = plan.ranks.front();
    auto b = boost_and_step("low_level_zero", options);
    auto& zero = dynamic_cast<ZeroOptimizer&>(*b.optimizer);
    EXPECT_EQ(r.bytes_of("parameters (BFloat16, gather buckets)"), storage_bytes(params_of(b.model->module())));
    EXPECT_EQ(r.bytes_of("optimizer state"), zero.shard().held_bytes());
    if (std::string(stage) == "1") {
      EXPECT_EQ(r.bytes_of("gradients"), storage_bytes(grads_of(b.model->module())));
    }
  }
}

TEST(MemoryPlan, GeminiHoldsWhatItPlansForEveryStaticPlacement) {
  for (const PluginOptions& options :
       {PluginOptions{{"precision", "bf16"}, {"chunk_size_mb", "0.02"}},
        PluginOptions{{"precision", "bf16"}, {"chunk_size_mb", "0.02"}, {"offload_optim_frac", "0.5"}},
        PluginOptions{{"chunk_size_mb", "0.03"}, {"offload_optim_frac", "0.5"}, {"offload_param_frac", "0.5"}},
        PluginOptions{{"precision", "bf16"}, {"shard_param_frac", "0.5"}, {"chunk_size_mb", "0.02"}}}) {
    SCOPED_TRACE(memory_planning::options_text(options));
    const auto plan = Booster::plan_memory("gemini", options, inputs_for(*make_vit(), world()->size()));
    const auto& r = plan.ranks.front();
    auto b = boost_and_step("gemini", options);
    auto& gemini = *dynamic_cast<GeminiModel&>(*b.model).chunk_owner();
    // Where state lives is the placement's (on CPU ranks "host" is the same memory).
    int64_t state_device = 0, state_host = 0;
    for (std::size_t c = 0; c < gemini.num_chunks(); ++c) {
      (gemini.placement(c).optim_on_host ? state_host : state_device) += gemini.chunk_state(c).held_bytes();
    }
    int64_t plan_state_device = 0, plan_state_host = 0, plan_params = 0;
    for (const auto& part : r.parts) {
      if (part.what.rfind("optimizer state", 0) == 0) (part.on_host ? plan_state_host : plan_state_device) += part.bytes;
      if (part.what.rfind("parameters", 0) == 0) plan_params += part.bytes;
    }
    EXPECT_EQ(plan_state_device, state_device);
    EXPECT_EQ(plan_state_host, state_host);
    EXPECT_GT(state_device + state_host, 0);
    EXPECT_EQ(plan_params, gemini.chunks().resident_device_bytes() + gemini.chunks().resident_host_bytes());
    // The collectives a step issues are the chunks' (the planner prices one per chunk).
    EXPECT_GT(gemini.num_chunks(), 1u);
    EXPECT_EQ(r.chunks, static_cast<int64_t>(gemini.num_chunks()));
  }
}

TEST(MemoryPlan, HybridParallelHoldsWhatItPlansOnEveryStage) {
  if (world()->size() < 2) GTEST_SKIP() << "needs two ranks";
  for (const PluginOptions& options :
       {PluginOptions{{"pp_size", "2"}, {"num_microbatches", "2"}, {"precision", "bf16"}},
        PluginOptions{{"pp_size", "2"}, {"num_microbatches", "2"}, {"zero_stage", "1"}, {"bucket_cap_mb", "0.01"}},
        PluginOptions{{"tp_size", "2"}},
        PluginOptions{{"pp_size", "2"}, {"num_microbatches", "2"}, {"zero_stage", "3"}, {"precision", "bf16"}},
        PluginOptions{{"tp_size", "2"}, {"zero_stage", "3"}, {"cpu_offload", "true"}, {"chunk_size_mb", "0.03"}}}) {
    SCOPED_TRACE(memory_planning::options_text(options));
    const auto plan = Booster::plan_memory("hybrid_parallel", options, inputs_for(*make_vit(), world()->size()));
    auto b = boost_and_step("hybrid_parallel", options);
    const int pp_rank = b.mesh->coordinate(dist::MeshAxis::kPp);
    ASSERT_EQ(plan.ranks.size(), static_cast<std::size_t>(b.mesh->size(dist::MeshAxis::kPp)));
    const auto& r = plan.ranks.at(static_cast<std::size_t>(pp_rank));
    auto& stage = b.model->module();
    if (options.count("zero_stage") && options.at("zero_stage") == "3") {
      // gemini's chunks: what stays between steps is counted from the tensors.
      const auto& owner = *dynamic_cast<GeminiOptimizer&>(*b.optimizer).chunk_owner();
      int64_t state = 0;
      for (std::size_t c = 0; c < owner.num_chunks(); ++c) state += owner.chunk_state(c).held_bytes();
      EXPECT_GT(state, 0);
      EXPECT_EQ(r.bytes_of("optimizer state"), state);
      EXPECT_EQ(r.bytes_of("parameters"), owner.chunks().resident_device_bytes() + owner.chunks().resident_host_bytes());
      EXPECT_EQ(owner.chunks().gathered_bytes(), 0) << "a step leaves no chunk gathered";
      EXPECT_EQ(r.chunks, static_cast<int64_t>(owner.num_chunks()));
      // A pipelined step gathers the stage's chunks at once; a plain pass, layer by layer (what
      // that saves on a deep model: HybridParallel.ZeroThreeGathersLayerByLayer...).
      EXPECT_GT(owner.chunks().peak_gathered_bytes(), 0);
      if (options.count("num_microbatches")) {
        EXPECT_EQ(r.bytes_of("buffers: gathered chunks"), owner.chunks().peak_gathered_bytes());
      } else {
        EXPECT_LE(owner.chunks().peak_gathered_bytes(), r.bytes_of("buffers: gathered chunks"));
      }
    } else if (options.count("zero_stage")) {
      EXPECT_EQ(r.chunks, 0) << "bucketed, not chunked";
      auto& zero = dynamic_cast<ZeroOptimizer&>(*b.optimizer);
      EXPECT_EQ(r.bytes_of("parameters (Float, gather buckets)"), storage_bytes(params_of(stage)));
      EXPECT_EQ(r.bytes_of("optimizer state"), zero.shard().held_bytes());
    } else {
      EXPECT_EQ(r.bytes_of("parameters"), storage_bytes(params_of(stage)));
      EXPECT_EQ(r.bytes_of("gradients"), storage_bytes(grads_of(stage)));
      EXPECT_EQ(r.bytes_of("optimizer state: moments"), optimizer_state_bytes(b.optimizer->optimizer()));
    }
  }
}

// A model too large to build here is planned from its summary: the seed's 6.45B-parameter ViT.
TEST(MemoryPlan, TheSeedsLargeVitIsPlannedWithoutBuildingIt) {
  if (world()->rank() != 0) return;
  const auto config = nn::ViTConfig().embed_dim(4096).depth(32).num_heads(64).mlp_ratio(4).num_classes(1000);
  const auto summary = nn::summarize_vision_transformer(config);
  EXPECT_EQ(summary.layers.size(), 34u);
  EXPECT_NEAR(static_cast<double>(summary.num_parameters()), 6.45e9, 0.01e9);
  MemoryPlanInputs in;
  in.model = summary;
  in.world_size(1).global_batch_size(16).device_memory_bytes(int64_t{80} << 30);
  const auto plan = Booster::plan_memory("gemini", {{"precision", "bf16"}, {"placement_policy", "auto"}}, in);
  const auto& r = plan.ranks.front();
  // In a world of one a chunk's shard is the chunk: 16 bytes of fp32 state per parameter, split
  // between the device and host memory.
  EXPECT_EQ(r.bytes_of("optimizer state"), 16 * summary.num_trainable());
  EXPECT_GT(r.host_bytes(), 0) << plan.to_string();
  EXPECT_LE(r.device_bytes(), int64_t{80} << 30) << plan.to_string();
}

}  // namespace
}  // namespace colo
