// The hybrid_parallel plugin beyond single-process equivalence (layout_equivalence_test.cpp):
// fp16 overflow agreed over the whole mesh, checkpoints across plugins and pipeline sizes, exact
// resume, and the errors its options, layouts and inputs can meet.
#include <colo/booster/booster.h>
#include <colo/engine/gemini_optimizer.h>
#include <colo/zero/chunked_parameters.h>
#include <colo/zero/shard_layout.h>
#include <colo/booster/plugin.h>
#include <colo/booster/plugin_registry.h>
#include <colo/booster/training_state.h>
#include <colo/checkpoint/sharded_safetensors.h>
#include <colo/files/files.h>
#include <colo/dist/process_group.h>
#include <colo/dist/process_group_mesh.h>
#include <colo/nn/vision_transformer.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dist_test_env.h"
#include "plugin_equivalence.h"

namespace colo {
namespace {

using namespace test;
using dist::MeshAxis;

// Deep enough to cut into pipeline stages (depth 8: 9 layers after the head joins the last block).
std::shared_ptr<nn::LayerStack> eight_block_vit(uint64_t seed = 9) { return make_vit(tiny_vit().depth(8), seed); }

PluginOptions pipeline(int pp, PluginOptions more = {}) {
  more["pp_size"] = std::to_string(pp);
  if (!more.count("microbatch_size")) more["num_microbatches"] = "4";
  return more;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

void expect_contains(const std::string& text, const std::vector<std::string>& needles) {
  for (const auto& needle : needles) EXPECT_NE(text.find(needle), std::string::npos) << needle << " not in: " << text;
}

// One training step of a boosted model on this replica's shard of `images`/`labels`; returns the loss.
double train_step(Booster& booster, Boosted& b, const torch::Tensor& images, const torch::Tensor& labels) {
  const int dp = b.mesh->size(MeshAxis::kDp), d = b.mesh->coordinate(MeshAxis::kDp);
  b.optimizer->zero_grad();
  double loss = 0;
  if (booster.plugin().supports_pipeline()) {
    loss = booster.execute_pipeline(shard(images, d, dp), shard(labels, d, dp), *b.model, b.criterion, *b.optimizer)
               .loss.item<double>();
  } else {
    auto l = b.criterion(b.model->forward(shard(images, d, dp)), shard(labels, d, dp));
    booster.backward(l, *b.optimizer);
    loss = l.item<double>();
  }
  b.optimizer->step();
  return loss;
}

// Every rank's part of the model's state, gathered by name into one map on every rank of `group`
// (through the store; small models only).
std::map<std::string, torch::Tensor> whole_state(const ModelWrapper& model, dist::ProcessGroup& group,
                                                 const std::string& key) {
  std::map<std::string, torch::Tensor> mine;
  for (auto& [name, tensor] : model.full_state()) mine[name] = tensor.detach().to(torch::kCPU).clone();
  std::vector<torch::Tensor> flat;
  for (auto& [name, tensor] : mine) flat.push_back(tensor);
  // Names travel through the store, values through it too (serialised by torch::pickle_save).
  const auto bytes = torch::pickle_save(c10::IValue(c10::List<torch::Tensor>(flat)));
  std::string names;
  for (auto& [name, tensor] : mine) names += name + "\n";
  group.store_set(fmt::format("{}/{}/names", key, group.rank()), names);
  group.store_set(fmt::format("{}/{}/values", key, group.rank()), std::string(bytes.begin(), bytes.end()));
  std::map<std::string, torch::Tensor> all;
  for (int r = 0; r < group.size(); ++r) {
    const std::string n = group.store_get(fmt::format("{}/{}/names", key, r));
    const std::string v = group.store_get(fmt::format("{}/{}/values", key, r));
    const auto list = torch::pickle_load(std::vector<char>(v.begin(), v.end())).toTensorList();
    std::string text(n.begin(), n.end());
    std::size_t start = 0, i = 0;
    for (auto end = text.find('\n'); end != std::string::npos; start = end + 1, end = text.find('\n', start)) {
      all[text.substr(start, end - start)] = list.get(i++);
    }
  }
  return all;
}

// A pipeline needs two ranks at least (a world of one, e.g. one GPU, skips these).
#define COLO_NEEDS_TWO_RANKS() \
  if (world()->size() < 2) GTEST_SKIP() << "a pipeline of two stages needs two ranks"

TEST(HybridParallel, Fp16OverflowOnOneStageSkipsTheStepOnEveryRank) {
  COLO_NEEDS_TWO_RANKS();
  const int size = world()->size() >= 4 ? 4 : 2;
  const auto group = consecutive_group(size, "hp_fp16");
  auto plugin = PluginRegistry::global().create(
      "hybrid_parallel", pipeline(2, {{"precision", "fp16"}, {"initial_scale", "1024"}, {"hysteresis", "1"}}),
      PluginContext{group, device()});
  Booster booster(plugin);
  // ScaleShift layers: LibTorch 1.13 has fp16 CPU kernels for their ops (not for the ViT's).
  torch::manual_seed(5);
  auto model = std::make_shared<nn::LayerStack>();
  for (int i = 0; i < 4; ++i) model->push_back(std::make_shared<ScaleShift>(8, i));
  model->to(device());
  auto b = booster.boost(model, conditioned_adamw(*model), [](const torch::Tensor& o, const torch::Tensor& t) {
    return (o - t).pow(2).mean();
  });
  const auto& mesh = *b.mesh;
  torch::manual_seed(13);
  const auto x = torch::randn({8 * mesh.size(MeshAxis::kDp), 8}).to(device());
  const auto y = torch::randn({8 * mesh.size(MeshAxis::kDp), 8}).to(device());
  const int dp = mesh.size(MeshAxis::kDp), d = mesh.coordinate(MeshAxis::kDp);
  auto step = [&](bool poison) {
    b.optimizer->zero_grad();
    booster.execute_pipeline(shard(x, d, dp), shard(y, d, dp), *b.model, b.criterion, *b.optimizer);
    // An inf in one gradient of the last stage of the last replica only.
    if (poison && mesh.coordinate(MeshAxis::kPp) == 1 && d == dp - 1) {
      torch::NoGradGuard no_grad;
      b.model->module().parameters().front().grad().view(-1)[0] = std::numeric_limits<float>::infinity();
    }
    return b.optimizer->step();
  };
  const auto before = b.model->full_state();
  EXPECT_FALSE(step(true)) << "pp " << mesh.coordinate(MeshAxis::kPp) << " dp " << d;
  EXPECT_EQ(b.optimizer->skipped_steps(), 1);
  const auto after_skip = named_state(b.model->full_state());
  for (const auto& [name, tensor] : before) EXPECT_TRUE(torch::equal(after_skip.at(name), tensor)) << name;
  EXPECT_TRUE(step(false));
  EXPECT_EQ(b.optimizer->skipped_steps(), 1);
  world()->barrier().wait();
}

// Saves under `from` (options on a group of `from_size`), loads under `to`, and checks that the
// model and the optimizer state survive: the loaded model's full state equals the saved one, and
// one more step from both gives the same weights.
void check_round_trip(const std::string& from_plugin, const PluginOptions& from, int from_size,
                      const std::string& to_plugin, const PluginOptions& to, int to_size, const std::string& dir) {
  SCOPED_TRACE(fmt::format("{} on {} -> {} on {}", from_plugin, from_size, to_plugin, to_size));
  const auto data = make_batches(3, 16, 17);
  std::map<std::string, torch::Tensor> saved, next_want;
  {
    const auto group = consecutive_group(from_size, "hp_ckpt_from");
    auto plugin = PluginRegistry::global().create(from_plugin, from, PluginContext{group, device()});
    Booster booster(plugin);
    auto model = eight_block_vit();
    auto b = booster.boost(model, conditioned_adamw(*model), cross_entropy);
    train_step(booster, b, data.images[0], data.labels[0]);
    train_step(booster, b, data.images[1], data.labels[1]);
    // Only the first group writes (the others would race for the same directory).
    if (world()->rank() < from_size) {
      booster.save_model(*b.model, dir);
      booster.save_optimizer(*b.optimizer, dir);
    }
    saved = whole_state(*b.model, *group, fmt::format("ckpt/{}/saved/{}", dir, world()->rank() / from_size));
    train_step(booster, b, data.images[2], data.labels[2]);
    next_want = whole_state(*b.model, *group, fmt::format("ckpt/{}/next/{}", dir, world()->rank() / from_size));
  }
  world()->barrier().wait();
  const auto group = consecutive_group(to_size, "hp_ckpt_to");
  auto plugin = PluginRegistry::global().create(to_plugin, to, PluginContext{group, device()});
  Booster booster(plugin);
  auto model = eight_block_vit(/*seed=*/99);  // other weights: the load must replace them all
  auto b = booster.boost(model, conditioned_adamw(*model), cross_entropy);
  booster.load_model(*b.model, dir);
  booster.load_optimizer(*b.optimizer, dir);
  for (const auto& [name, tensor] : b.model->full_state()) {
    ASSERT_TRUE(saved.count(name)) << name;
    EXPECT_TRUE(torch::equal(tensor.to(torch::kCPU), saved.at(name))) << name;
  }
  train_step(booster, b, data.images[2], data.labels[2]);
  for (const auto& [name, tensor] : b.model->full_state()) {
    EXPECT_LE(relative_error(tensor, next_want.at(name)), 1e-5) << name << ": the optimizer state did not carry over";
  }
  world()->barrier().wait();
}

// zero_stage 3 (gemini's chunks) saves masters and Adam state gathered over dp, and over tp where
// tensor parallelism cut them, like the other engines: a pipeline's checkpoint loads under gemini,
// ZeRO-2's under a pipeline of chunks, and a tensor-parallel layout of chunks goes through the
// one-process chain (tp 2 at 2 ranks, tp 2 x dp 2 at 4, tp 2 x pp 2 x dp 2 at 8).
void tensor_parallel_checkpoint_chain(const PluginOptions& layout, const std::string& label);

TEST(HybridParallel, ZeroThreeCheckpointsLoadUnderGeminiAndOtherLayouts) {
  COLO_NEEDS_TWO_RANKS();
  const int size = world()->size();
  const auto dir = shared_directory("hp_zero3_checkpoints");
  check_round_trip("hybrid_parallel", pipeline(2, {{"zero_stage", "3"}}), 2, "gemini", {}, 2,
                   files::join(dir, "pp2zero3_to_gemini"));
  check_round_trip("low_level_zero", {{"stage", "2"}}, 2, "hybrid_parallel", pipeline(2, {{"zero_stage", "3"}}), 2,
                   files::join(dir, "llz_to_pp2zero3"));
  remove_shared_directory(dir);
  if (size != 2 && size != 4 && size != 8) return;
  PluginOptions layout{{"tp_size", "2"}, {"zero_stage", "3"}};
  if (size == 8) layout = pipeline(2, layout);
  tensor_parallel_checkpoint_chain(layout, fmt::format("tp 2, zero_stage 3, on {} ranks", size));
}

// zero_stage 3 on a deep model in small chunks: a plain step (one pass, no pipeline) holds a
// few chunks gathered at a time, as gemini does; a pipelined one (pp 1, 2 microbatches) gathers
// every chunk once for the step. Neither leaves a chunk gathered after it.
TEST(HybridParallel, ZeroThreeGathersLayerByLayerAloneAndTheStageOnceUnderAPipeline) {
  const auto data = make_batches(1, 8 * world()->size(), 23);
  int64_t whole = 0, plain_peak = 0;
  for (const bool pipelined : {false, true}) {
    PluginOptions options{{"zero_stage", "3"}, {"chunk_size_mb", "0.05"}};
    if (pipelined) options["num_microbatches"] = "2";
    auto plugin = PluginRegistry::global().create("hybrid_parallel", options, PluginContext{world(), device()});
    Booster booster(plugin);
    auto model = eight_block_vit();
    auto b = booster.boost(model, conditioned_adamw(*model), cross_entropy);
    auto& chunks = dynamic_cast<GeminiOptimizer&>(*b.optimizer).chunk_owner()->chunks();
    whole = 0;
    for (std::size_t c = 0; c < chunks.num_chunks(); ++c) {
      whole += chunks.layout(c).padded_bucket_numel(0) * static_cast<int64_t>(c10::elementSize(chunks.working_dtype()));
    }
    ASSERT_GE(chunks.num_chunks(), 6u) << "the case needs a model of many chunks";
    chunks.reset_peak();  // from the step on
    train_step(booster, b, data.images[0], data.labels[0]);
    EXPECT_EQ(chunks.gathered_bytes(), 0) << (pipelined ? "pipelined" : "plain");
    if (pipelined) {
      EXPECT_EQ(chunks.peak_gathered_bytes(), whole);
    } else {
      plain_peak = chunks.peak_gathered_bytes();
      EXPECT_GT(plain_peak, 0);
      EXPECT_LE(plain_peak, whole / 2) << "a plain pass gathers a few chunks at a time";
    }
  }
}

TEST(HybridParallel, CheckpointsLoadAcrossPluginsAndPipelineSizes) {
  COLO_NEEDS_TWO_RANKS();
  const auto dir = shared_directory("hp_checkpoints");
  check_round_trip("hybrid_parallel", pipeline(2), 2, "torch_ddp", {}, 1, files::join(dir, "pp2_to_ddp1"));
  check_round_trip("torch_ddp", {}, 2, "hybrid_parallel", pipeline(2), 2, files::join(dir, "ddp2_to_pp2"));
  check_round_trip("hybrid_parallel", pipeline(2, {{"zero_stage", "2"}}), 2, "low_level_zero", {{"stage", "1"}}, 2,
                   files::join(dir, "pp2zero2_to_llz"));
  if (world()->size() >= 4) {
    check_round_trip("hybrid_parallel", pipeline(2, {{"zero_stage", "1"}}), 4, "hybrid_parallel", pipeline(4), 4,
                     files::join(dir, "pp2dp2_to_pp4"));
    check_round_trip("hybrid_parallel", pipeline(4, {{"pp_style", "interleaved"}, {"num_model_chunks", "2"}}), 4,
                     "hybrid_parallel", pipeline(2), 2, files::join(dir, "pp4_to_pp2"));
  }
  remove_shared_directory(dir);
}

// Tensor parallelism: a checkpoint holds full tensors under timm's names, so one process without
// any parallelism reads what tp x pp x dp wrote, and the reverse. The chain: one process trains
// two steps and saves; the sharded layout loads that, trains step 3 (equal to the process's step 3:
// the load sliced each tensor right) and saves; the process loads that (equal to its own step 3:
// the save gathered each tensor right, optimizer state included: step 4 agrees too).
// 2d (a 2 x 2 grid: weights cut in blocks, LayerNorms and biases in pieces repeated down the
// grid's columns) goes through the same chain at 4 ranks, and under pp 2 at 8.
void tensor_parallel_checkpoint_chain(const PluginOptions& layout, const std::string& label);

TEST(HybridParallel, TensorParallelCheckpointsLoadInOneProcessAndBack) {
  const int size = world()->size();
  if (size != 2 && size != 4 && size != 8) GTEST_SKIP() << "runs on 2, 4 or 8 ranks";
  PluginOptions layout{{"tp_size", "2"}};
  if (size >= 4) layout = pipeline(2, layout);  // tp2 x pp2 (x dp2 on 8 ranks)
  tensor_parallel_checkpoint_chain(layout, fmt::format("tp 2 on {} ranks", size));
  const PluginOptions grid{{"tp_size", "4"}, {"tp_mode", "2d"}};
  if (size == 4) tensor_parallel_checkpoint_chain(grid, "2d, 2 x 2, on 4 ranks");
  if (size == 8) tensor_parallel_checkpoint_chain(pipeline(2, grid), "2d, 2 x 2, x pp 2 on 8 ranks");
}

// 2.5d (2 layers of a 2 x 2 grid: 2d's blocks, each held by both layers) through the same chain:
// the load slices each tensor for both layers, the save gathers the first layer's pieces.
TEST(HybridParallel, TwoAndAHalfDimensionalCheckpointsLoadInOneProcessAndBack) {
  if (world()->size() != 8) GTEST_SKIP() << "2 layers of a 2 x 2 grid on 8 ranks";
  tensor_parallel_checkpoint_chain({{"tp_size", "8"}, {"tp_mode", "2.5d"}, {"tp_depth", "2"}},
                                   "2.5d, 2 layers of 2 x 2, on 8 ranks");
}

// Across the modes, every file read back whole in one process (a tp layout's full_state() is its
// rank's pieces): 2d (a 2 x 2 grid, x dp 2) trains two steps and saves; 3d (a 2 x 2 x 2 cube)
// loads that and saves it again at once (the same tensors, bit for bit: its load sliced each
// timm-named tensor into the cube's pieces and its save gathered them back), trains step 3 and
// saves; one process reads that (its own step 3 within the tolerance) and saves it again; 1d (tp
// 2 x dp 4) loads that, trains step 4 and saves, which one process reads as its own step 4: the
// optimizer state travelled with the weights through every mode.
TEST(HybridParallel, CheckpointsGoFromTwoDToThreeDToOneProcessToOneD) {
  if (world()->size() != 8) GTEST_SKIP() << "a 2 x 2 x 2 cube on 8 ranks";
  const auto dir = shared_directory("hp_mode_checkpoints");
  const auto from_2d = files::join(dir, "two_d"), again_3d = files::join(dir, "three_d_at_once");
  const auto from_3d = files::join(dir, "three_d"), from_one = files::join(dir, "one_process");
  const auto from_1d = files::join(dir, "one_d");
  const auto data = make_batches(4, 16, 37);
  // Three modes' sums in three orders before Adam's normalised step: a bias whose gradient is
  // small moves by ~lr whatever its size, so its relative error grows past the one-layout rows'
  // 2e-5 (CUDA tensors over Gloo on one H200: 2.3e-5 on a proj bias; 2e-5 holds on CPU ranks).
  constexpr double kTolerance = 5e-5;
  const auto single = consecutive_group(1, "hp_modes_single");
  const auto boosted = [&](const std::string& plugin_name, const PluginOptions& options,
                           std::shared_ptr<dist::ProcessGroup> group, uint64_t seed, auto&& body) {
    auto plugin = PluginRegistry::global().create(plugin_name, options, PluginContext{std::move(group), device()});
    Booster booster(plugin);
    auto model = eight_block_vit(seed);
    auto b = booster.boost(model, conditioned_adamw(*model), cross_entropy);
    body(booster, b);
    world()->barrier().wait();
  };
  // What one process holds after loading `from` (its own copy, on every rank).
  const auto read_back = [&](const std::string& from) {
    std::map<std::string, torch::Tensor> state;
    boosted("torch_ddp", {}, single, 98, [&](Booster& booster, auto& b) {
      booster.load_model(*b.model, from);
      booster.load_optimizer(*b.optimizer, from);
      for (const auto& [name, tensor] : b.model->full_state()) state[name] = tensor.detach().to(torch::kCPU).clone();
    });
    return state;
  };
  std::map<std::string, torch::Tensor> after3, after4;
  boosted("torch_ddp", {}, single, 9, [&](Booster& booster, auto& b) {
    for (int step = 0; step < 4; ++step) {
      train_step(booster, b, data.images[step], data.labels[step]);
      auto& kept = step == 2 ? after3 : after4;
      if (step >= 2) {
        for (const auto& [name, tensor] : b.model->full_state()) kept[name] = tensor.detach().to(torch::kCPU).clone();
      }
    }
  });
  boosted("hybrid_parallel", {{"tp_size", "4"}, {"tp_mode", "2d"}}, world(), 9, [&](Booster& booster, auto& b) {
    train_step(booster, b, data.images[0], data.labels[0]);
    train_step(booster, b, data.images[1], data.labels[1]);
    booster.save_model(*b.model, from_2d);
    booster.save_optimizer(*b.optimizer, from_2d);
  });
  boosted("hybrid_parallel", {{"tp_size", "8"}, {"tp_mode", "3d"}}, world(), 99, [&](Booster& booster, auto& b) {
    booster.load_model(*b.model, from_2d);
    booster.load_optimizer(*b.optimizer, from_2d);
    booster.save_model(*b.model, again_3d);
    booster.save_optimizer(*b.optimizer, again_3d);
    train_step(booster, b, data.images[2], data.labels[2]);
    booster.save_model(*b.model, from_3d);
    booster.save_optimizer(*b.optimizer, from_3d);
  });
  const auto saved_2d = read_back(from_2d);
  for (const auto& [name, tensor] : read_back(again_3d)) {
    EXPECT_TRUE(torch::equal(tensor, saved_2d.at(name))) << name << ": 3d loaded and saved 2d's file unchanged";
  }
  const auto stepped_3d = read_back(from_3d);
  for (const auto& [name, tensor] : stepped_3d) {
    EXPECT_LE(relative_error(tensor, after3.at(name)), kTolerance) << name << " after step 3 (3d)";
  }
  boosted("torch_ddp", {}, single, 97, [&](Booster& booster, auto& b) {
    booster.load_model(*b.model, from_3d);
    booster.load_optimizer(*b.optimizer, from_3d);
    if (world()->rank() == 0) {
      booster.save_model(*b.model, from_one);
      booster.save_optimizer(*b.optimizer, from_one);
    }
  });
  boosted("hybrid_parallel", {{"tp_size", "2"}}, world(), 96, [&](Booster& booster, auto& b) {
    booster.load_model(*b.model, from_one);
    booster.load_optimizer(*b.optimizer, from_one);
    train_step(booster, b, data.images[3], data.labels[3]);
    booster.save_model(*b.model, from_1d);
    booster.save_optimizer(*b.optimizer, from_1d);
  });
  for (const auto& [name, tensor] : read_back(from_1d)) {
    EXPECT_LE(relative_error(tensor, after4.at(name)), kTolerance) << name << " after step 4 (1d): optimizer state";
  }
  remove_shared_directory(dir);
}

void tensor_parallel_checkpoint_chain(const PluginOptions& layout, const std::string& label) {
  SCOPED_TRACE(label);
  const auto dir = shared_directory("hp_tp_checkpoints");
  const auto from_one = files::join(dir, "one_process"), from_tp = files::join(dir, "tensor_parallel");
  const auto data = make_batches(4, 16, 31);
  const auto single = consecutive_group(1, "hp_tp_single");
  // Within a weight tolerance of tensor-parallel training (layout_equivalence_test.cpp: a
  // row-parallel layer sums its pieces' products in another order).
  constexpr double kTolerance = 2e-5;

  std::map<std::string, torch::Tensor> after3, after4;
  auto copy_of = [](const NamedTensors& state) {  // full_state() holds the live tensors
    std::map<std::string, torch::Tensor> copy;
    for (const auto& [name, tensor] : state) copy[name] = tensor.detach().clone();
    return copy;
  };
  {
    auto plugin = PluginRegistry::global().create("torch_ddp", {}, PluginContext{single, device()});
    Booster booster(plugin);
    auto model = eight_block_vit();
    auto b = booster.boost(model, conditioned_adamw(*model), cross_entropy);
    train_step(booster, b, data.images[0], data.labels[0]);
    train_step(booster, b, data.images[1], data.labels[1]);
    if (world()->rank() == 0) {
      booster.save_model(*b.model, from_one);
      booster.save_optimizer(*b.optimizer, from_one);
    }
    train_step(booster, b, data.images[2], data.labels[2]);
    after3 = copy_of(b.model->full_state());
    train_step(booster, b, data.images[3], data.labels[3]);
    after4 = copy_of(b.model->full_state());
  }
  world()->barrier().wait();
  {
    auto plugin = PluginRegistry::global().create("hybrid_parallel", layout, PluginContext{world(), device()});
    Booster booster(plugin);
    auto model = eight_block_vit(/*seed=*/99);  // other weights: the load must replace them all
    auto b = booster.boost(model, conditioned_adamw(*model), cross_entropy);
    booster.load_model(*b.model, from_one);
    booster.load_optimizer(*b.optimizer, from_one);
    train_step(booster, b, data.images[2], data.labels[2]);
    booster.save_model(*b.model, from_tp);
    booster.save_optimizer(*b.optimizer, from_tp);
  }
  world()->barrier().wait();
  // Written as full tensors: the files carry timm's shapes, not a tp rank's piece.
  const auto written = checkpoint::load_safetensors_set(from_tp, "model", [](const std::string&) { return true; });
  ASSERT_EQ(written.size(), after3.size());
  for (const auto& [name, tensor] : written) {
    ASSERT_TRUE(after3.count(name)) << name;
    EXPECT_EQ(tensor.sizes(), after3.at(name).sizes()) << name;
  }
  {
    auto plugin = PluginRegistry::global().create("torch_ddp", {}, PluginContext{single, device()});
    Booster booster(plugin);
    auto model = eight_block_vit(/*seed=*/98);
    auto b = booster.boost(model, conditioned_adamw(*model), cross_entropy);
    booster.load_model(*b.model, from_tp);
    booster.load_optimizer(*b.optimizer, from_tp);
    for (const auto& [name, tensor] : b.model->full_state()) {
      EXPECT_LE(relative_error(tensor, after3.at(name)), kTolerance) << name << " after step 3";
    }
    train_step(booster, b, data.images[3], data.labels[3]);
    for (const auto& [name, tensor] : b.model->full_state()) {
      EXPECT_LE(relative_error(tensor, after4.at(name)), kTolerance) << name << " after step 4: optimizer state";
    }
  }
  world()->barrier().wait();
  remove_shared_directory(dir);
}

// 2d cuts every batch into q row blocks: a batch q does not divide (an evaluation's last, a
// microbatch of 3 on a 2 x 2 grid) goes in padded and comes out trimmed, with the outputs and the
// loss of one process on the same rows, through model->forward and through the pipeline's
// microbatches (evaluating 5 rows as 3 and 2, training 6 as 3 and 3, each padded to 4).
void grid_takes_batches_it_does_not_divide(const PluginOptions& grid);

TEST(HybridParallel, TwoDimensionalGridTakesBatchesItsSideDoesNotDivide) {
  if (world()->size() != 4) GTEST_SKIP() << "a 2 x 2 grid on 4 ranks";
  grid_takes_batches_it_does_not_divide({{"tp_size", "4"}, {"tp_mode", "2d"}});
}

// 2.5d cuts every batch into d·q row blocks (2 layers of a 2 x 2 grid: 4): the same batches, each
// padded to 4 rows.
TEST(HybridParallel, TwoAndAHalfDimensionalGridTakesBatchesItDoesNotDivide) {
  if (world()->size() != 8) GTEST_SKIP() << "2 layers of a 2 x 2 grid on 8 ranks";
  grid_takes_batches_it_does_not_divide({{"tp_size", "8"}, {"tp_mode", "2.5d"}, {"tp_depth", "2"}});
}

// 3d cuts every batch into q² row blocks (a 2 x 2 x 2 cube: 4), as 2.5d's layers do here.
TEST(HybridParallel, ThreeDimensionalCubeTakesBatchesItDoesNotDivide) {
  if (world()->size() != 8) GTEST_SKIP() << "a 2 x 2 x 2 cube on 8 ranks";
  grid_takes_batches_it_does_not_divide({{"tp_size", "8"}, {"tp_mode", "3d"}});
}

void grid_takes_batches_it_does_not_divide(const PluginOptions& grid) {
  // Evaluated: 5 images (microbatches of 3 and 2); trained: 6 (microbatches of 3, equal as
  // training needs).
  const auto data = make_batches(1, 6, 17);
  const auto& images = data.images[0];
  const auto& labels = data.labels[0];
  const auto eval_images = images.narrow(0, 0, 5), eval_labels = labels.narrow(0, 0, 5);
  const auto single = consecutive_group(1, "hp_2d_odd_single");
  torch::Tensor want_logits;
  double want_loss = 0;
  {
    auto plugin = PluginRegistry::global().create("torch_ddp", {}, PluginContext{single, device()});
    Booster booster(plugin);
    auto model = eight_block_vit();
    auto b = booster.boost(model, conditioned_adamw(*model), cross_entropy);
    b.model->eval();
    {
      torch::NoGradGuard no_grad;
      want_logits = b.model->forward(eval_images).detach();
    }
    b.model->train();
    want_loss = train_step(booster, b, images, labels);
  }
  for (const bool pipelined : {false, true}) {
    SCOPED_TRACE(pipelined ? "pp 1 with 2 microbatches" : "no microbatches");
    PluginOptions options = grid;
    if (pipelined) options["num_microbatches"] = "2";
    auto plugin = PluginRegistry::global().create("hybrid_parallel", options, PluginContext{world(), device()});
    Booster booster(plugin);
    auto model = eight_block_vit();
    auto b = booster.boost(model, conditioned_adamw(*model), cross_entropy);
    b.model->eval();
    torch::Tensor logits;
    {
      torch::NoGradGuard no_grad;
      logits = pipelined ? booster
                               .execute_pipeline(eval_images, eval_labels, *b.model, b.criterion, *b.optimizer,
                                                 PipelineOptions().forward_only(true).return_outputs(true))
                               .outputs
                         : b.model->forward(eval_images).detach();
    }
    ASSERT_EQ(logits.sizes(), want_logits.sizes());
    EXPECT_LE(relative_error(logits, want_logits), 1e-5);
    b.model->train();
    EXPECT_NEAR(train_step(booster, b, images, labels), want_loss, 1e-5 * std::abs(want_loss));
  }
  world()->barrier().wait();
}

TEST(HybridParallel, ResumeUnderThePipelineIsExact) {
  COLO_NEEDS_TWO_RANKS();
  const int size = world()->size() >= 4 ? 4 : 2;
  const auto dir = shared_directory("hp_resume");
  const auto group = consecutive_group(size, "hp_resume");
  const auto options = pipeline(2, {{"zero_stage", size == 4 ? "2" : "0"}, {"max_grad_norm", "0.5"}});
  const auto data = make_batches(4, 16, 23);
  const auto my_dir = files::join(dir, std::to_string(world()->rank() / size));
  std::vector<double> want, got;
  std::map<std::string, torch::Tensor> want_state;
  {
    auto plugin = PluginRegistry::global().create("hybrid_parallel", options, PluginContext{group, device()});
    Booster booster(plugin);
    auto model = eight_block_vit();
    auto b = booster.boost(model, conditioned_adamw(*model), cross_entropy);
    train_step(booster, b, data.images[0], data.labels[0]);
    train_step(booster, b, data.images[1], data.labels[1]);
    // save_state's barriers are the world's: every group saves at once, each into its directory.
    booster.save_state(b, TrainingProgress{}, my_dir);
    for (int i = 2; i < 4; ++i) want.push_back(train_step(booster, b, data.images[i], data.labels[i]));
    want_state = named_state(b.model->full_state());
  }
  {
    auto plugin = PluginRegistry::global().create("hybrid_parallel", options, PluginContext{group, device()});
    Booster booster(plugin);
    auto model = eight_block_vit(/*seed=*/77);
    auto b = booster.boost(model, conditioned_adamw(*model), cross_entropy);
    booster.load_state(b, my_dir);
    for (int i = 2; i < 4; ++i) got.push_back(train_step(booster, b, data.images[i], data.labels[i]));
    EXPECT_EQ(got, want) << "losses after resuming";
    for (const auto& [name, tensor] : b.model->full_state()) {
      EXPECT_TRUE(torch::equal(tensor, want_state.at(name))) << name;
    }
  }
  remove_shared_directory(dir);
}

TEST(HybridParallel, RejectsBadOptionsAllAtOnce) {
  const auto message = error_of([] {
    PluginRegistry::global().create("hybrid_parallel",
                                    {{"tp_size", "2"},
                                     {"pp_size", "2"},
                                     {"zero_stage", "4"},
                                     {"chunk_size_mb", "1"},
                                     {"num_model_chunks", "2"},
                                     {"pp_style", "1f1b"},
                                     {"precision", "fp4"},
                                     {"layers_per_stage", "3,x"},
                                     {"bogus", "1"}},
                                    PluginContext{world(), device()});
  });
  expect_contains(message, {"num_microbatches or microbatch_size", "zero_stage must be 0, 1, 2 or 3",
                            "chunk_size_mb sizes zero_stage 3's chunks", "interleaved", "fp4",
                            "'x' is not a positive", "unknown option 'bogus'", "valid options"});
  EXPECT_EQ(message.find("tp_size"), message.find("valid options: tp_size") + std::string("valid options: ").size())
      << "tp_size=2 is a valid option: " << message;
  // Sequence parallelism splits the tokens over tp ranks: it needs some, and zero bubble's
  // deferred weight gradients are not summed over them yet.
  expect_contains(error_of([] {
                    PluginRegistry::global().create("hybrid_parallel",
                                                    {{"enable_sequence_parallelism", "true"},
                                                     {"pp_size", "2"},
                                                     {"num_microbatches", "4"},
                                                     {"pp_style", "zero_bubble"}},
                                                    PluginContext{world(), device()});
                  }),
                  {"enable_sequence_parallelism needs tp_size > 1", "pp_style=zero_bubble is not supported yet"});
  expect_contains(error_of([] {
                    PluginRegistry::global().create(
                        "hybrid_parallel",
                        {{"pp_size", "2"}, {"num_microbatches", "3"}, {"pp_style", "interleaved"}, {"num_model_chunks", "2"}},
                        PluginContext{world(), device()});
                  }),
                  {"multiple of", "pp"});
}

TEST(HybridParallel, RejectsLayoutsThatDoNotFitTheWorldOrTheModel) {
  expect_contains(error_of([] {
                    PluginRegistry::global().create("hybrid_parallel", pipeline(3), PluginContext{world(), device()});
                  }),
                  {"hybrid_parallel", "not divisible by pp_size x tp_size"});
  COLO_NEEDS_TWO_RANKS();
  const auto group = consecutive_group(2, "hp_layouts");
  // depth 2: 3 layers after the head joins the last block, too few for 2 ranks x 2 chunks.
  auto plugin = PluginRegistry::global().create(
      "hybrid_parallel", pipeline(2, {{"pp_style", "interleaved"}, {"num_model_chunks", "2"}}),
      PluginContext{group, device()});
  Booster booster(plugin);
  torch::manual_seed(1);
  auto shallow = nn::make_vision_transformer(tiny_vit());
  expect_contains(error_of([&] { booster.boost(shallow, conditioned_adamw(*shallow), cross_entropy); }),
                  {"4 layers cannot be cut into pp_size 2 x num_model_chunks 2 = 4 stages"});

  auto model = eight_block_vit();
  auto plain = PluginRegistry::global().create("hybrid_parallel", pipeline(2), PluginContext{group, device()});
  Booster pipelined(plain);
  auto b = pipelined.boost(model, conditioned_adamw(*model), cross_entropy);
  const auto data = make_batches(1, 6, 2);
  expect_contains(error_of([&] { b.model->forward(data.images[0]); }), {"execute_pipeline", "2 pipeline stages"});
  expect_contains(error_of([&] {
                    pipelined.execute_pipeline(data.images[0], data.labels[0], *b.model, b.criterion, *b.optimizer);
                  }),
                  {"a batch of 6 does not split into num_microbatches=4"});
  world()->barrier().wait();
}

}  // namespace
}  // namespace colo
