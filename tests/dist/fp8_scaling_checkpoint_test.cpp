// Delayed float8 scaling's state travels in the training state (issue 39): saved under one plugin
// and layout, it resumes under another, each layer's amax history, scale and dropped-amax count
// found by the layer's canonical name wherever the layer now lives (a pipeline stage holds some
// layers; tensor-parallel ranks hold pieces of one). Float8 products need an H100 or H200, so
// here the state is attached to a CPU run's optimizer as attach_fp8_scaling does under fp8: what
// is tested is the checkpoints' path, which is the same for every precision.
#include <colo/booster/booster.h>
#include <colo/booster/plugin_registry.h>
#include <colo/booster/training_state.h>
#include <colo/engine/parallelize.h>
#include <colo/files/files.h>
#include <colo/nn/fp8_scaling.h>
#include <colo/nn/vision_transformer.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dist_test_env.h"
#include "plugin_equivalence.h"

namespace colo::test {
namespace {

// The float8-able layers this rank holds, by canonical name: every 2-D ".weight" of its part of
// the model but the patch embedding's (4-D) — the names use_fp8_linears gives its layers.
std::vector<std::string> held_linear_layers(const ModelWrapper& model) {
  std::vector<std::string> names;
  const std::string suffix = ".weight";
  for (const auto& [name, tensor] : model.full_state()) {
    if (tensor.dim() == 2 && name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      names.push_back(name.substr(0, name.size() - suffix.size()));
    }
  }
  return names;
}

// Three steps of amaxes that depend on the layer's name only (so every rank of any layout makes
// the same ones for a layer), each layer's output gradient non-finite in the second, each step
// ending with the update.
void record_steps(nn::Fp8DelayedScaling& scaling) {
  for (int step = 0; step < 3; ++step) {
    for (int64_t i = 0; i < scaling.layers(); ++i) {
      const auto seed = std::hash<std::string>{}(scaling.layer_names()[static_cast<size_t>(i)]) + step;
      auto g = at::detail::createCPUGenerator(seed);
      const auto amax = torch::rand({3}, g, torch::kFloat) * 10 + 0.5;
      const auto slot = scaling.layer(i);
      slot->input_amax.fill_(amax[0].item<float>());
      slot->weight_amax.fill_(amax[1].item<float>());
      slot->grad_amax.fill_(step == 1 ? std::numeric_limits<float>::infinity() : amax[2].item<float>());
    }
    scaling.update();
  }
}

std::shared_ptr<nn::Fp8DelayedScaling> attached_scaling(Boosted& b, int64_t history_length = 4) {
  auto names = held_linear_layers(*b.model);  // collective under ZeRO and gemini: every rank calls it
  auto scaling = std::make_shared<nn::Fp8DelayedScaling>(
      static_cast<int64_t>(names.size()), amp::DelayedScalingOptions().history_length(history_length),
      torch::TensorOptions());
  scaling->set_layer_names(std::move(names));
  attach_fp8_scaling(*b.optimizer, scaling, {});
  return scaling;
}

void expect_entries_equal(const nn::Fp8DelayedScaling& got, const nn::Fp8DelayedScaling& want) {
  const auto want_entries = want.layer_entries();
  std::map<std::string, torch::Tensor> wanted(want_entries.begin(), want_entries.end());
  const auto entries = got.layer_entries();
  ASSERT_EQ(entries.size(), wanted.size());
  for (const auto& [name, tensor] : entries) {
    ASSERT_TRUE(wanted.count(name)) << name;
    EXPECT_TRUE(torch::equal(tensor, wanted.at(name))) << name << ": " << tensor << " against " << wanted.at(name);
  }
}

struct Layout {
  std::string plugin;
  PluginOptions options;
};

PluginOptions fp8_pipeline(int pp, PluginOptions more = {}) {
  more["pp_size"] = std::to_string(pp);
  more["num_microbatches"] = "2";
  return more;
}

// Saves a whole training state under `from` with a primed delayed-scaling state, loads it under
// `to` (on the whole world each), and checks every layer this rank now holds got its own history.
void check_scaling_round_trip(const Layout& from, const Layout& to, const std::string& dir) {
  SCOPED_TRACE(fmt::format("{} -> {}", from.plugin, to.plugin));
  {
    auto plugin = PluginRegistry::global().create(from.plugin, from.options, PluginContext{world(), device()});
    Booster booster(plugin);
    auto model = make_vit(tiny_vit().depth(4), 5);
    auto b = booster.boost(model, conditioned_adamw(*model), cross_entropy);
    auto scaling = attached_scaling(b);
    record_steps(*scaling);
    ASSERT_TRUE(scaling->primed());
    booster.save_state(b, TrainingProgress{}, dir);
  }
  auto plugin = PluginRegistry::global().create(to.plugin, to.options, PluginContext{world(), device()});
  Booster booster(plugin);
  auto model = make_vit(tiny_vit().depth(4), 6);
  auto b = booster.boost(model, conditioned_adamw(*model), cross_entropy);
  auto scaling = attached_scaling(b);
  ASSERT_FALSE(scaling->primed());
  booster.load_state(b, dir);
  EXPECT_TRUE(scaling->primed());
  // What this rank's layers saved, made again here from their names.
  nn::Fp8DelayedScaling want(scaling->layers(), scaling->forward().options(), torch::TensorOptions());
  want.set_layer_names(scaling->layer_names());
  record_steps(want);
  expect_entries_equal(*scaling, want);
  EXPECT_GT(scaling->nonfinite_amaxes(), 0) << "the dropped amaxes' counts travel too";
  world()->barrier().wait();
}

TEST(Fp8ScalingCheckpoint, TheHistoriesResumeUnderAnotherPluginAndLayout) {
  const int size = world()->size();
  if (size < 2) GTEST_SKIP() << "a pipeline of two stages needs two ranks";
  const auto dir = shared_directory("fp8_scaling_ckpt");
  PluginOptions split = fp8_pipeline(2);
  if (size >= 4) split["tp_size"] = "2";  // pp 2 x tp 2 (x dp 2 on 8 ranks): pieces of layers too
  check_scaling_round_trip({"torch_ddp", {}}, {"hybrid_parallel", split}, files::join(dir, "ddp_to_split"));
  check_scaling_round_trip({"hybrid_parallel", split}, {"gemini", {}}, files::join(dir, "split_to_gemini"));
  check_scaling_round_trip({"gemini", {}}, {"low_level_zero", {{"stage", "2"}}}, files::join(dir, "gemini_to_llz"));
  check_scaling_round_trip({"low_level_zero", {{"stage", "2"}}}, {"torch_ddp", {}}, files::join(dir, "llz_to_ddp"));
  remove_shared_directory(dir);
}

// A run without delayed scaling resumes a checkpoint that has it (the histories are dropped), one
// with it resumes a checkpoint without (a fresh history, unprimed), and one whose history is of
// another length is refused, saying which option differs, before anything is loaded.
TEST(Fp8ScalingCheckpoint, ResumesWithoutTheStateEitherWayAndRefusesAnotherHistoryLength) {
  const auto dir = shared_directory("fp8_scaling_mixed");
  const auto with = files::join(dir, "with"), without = files::join(dir, "without");
  const auto boosted = [](std::shared_ptr<Plugin>& plugin, std::unique_ptr<Booster>& booster) {
    plugin = PluginRegistry::global().create("torch_ddp", {}, PluginContext{world(), device()});
    booster = std::make_unique<Booster>(plugin);
    auto model = make_vit(tiny_vit().depth(2), 6);
    return booster->boost(model, conditioned_adamw(*model), cross_entropy);
  };
  {
    std::shared_ptr<Plugin> plugin;
    std::unique_ptr<Booster> booster;
    auto b = boosted(plugin, booster);
    booster->save_state(b, TrainingProgress{}, without);
    record_steps(*attached_scaling(b));
    booster->save_state(b, TrainingProgress{}, with);
  }
  {
    std::shared_ptr<Plugin> plugin;
    std::unique_ptr<Booster> booster;
    auto b = boosted(plugin, booster);
    EXPECT_NO_THROW(booster->load_state(b, with)) << "a run without delayed scaling";
  }
  {
    std::shared_ptr<Plugin> plugin;
    std::unique_ptr<Booster> booster;
    auto b = boosted(plugin, booster);
    auto scaling = attached_scaling(b);
    booster->load_state(b, without);
    EXPECT_FALSE(scaling->primed()) << "a checkpoint without the state";
  }
  {
    std::shared_ptr<Plugin> plugin;
    std::unique_ptr<Booster> booster;
    auto b = boosted(plugin, booster);
    auto scaling = attached_scaling(b, /*history_length=*/5);
    const auto untouched = scaling->layer_entries();
    try {
      booster->load_state(b, with);
      ADD_FAILURE() << "a history of 4 steps loaded into one of 5";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("fp8_amax_history_len"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(scaling->primed());
    const auto after = scaling->layer_entries();
    ASSERT_EQ(after.size(), untouched.size());
    for (size_t i = 0; i < after.size(); ++i) {
      EXPECT_TRUE(torch::equal(after[i].second, untouched[i].second)) << after[i].first << " changed";
    }
  }
  remove_shared_directory(dir);
}

}  // namespace
}  // namespace colo::test
