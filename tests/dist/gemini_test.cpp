// gemini (ZeRO-3 in chunks) beyond the equivalence table (layout_equivalence_test.cpp trains it
// against one process at 1, 2 and 4 ranks, every placement): what each rank holds, what forward
// gathers at once, auto placement's split, checkpoints to and from the other plugins at other
// world sizes, and the errors for what gemini cannot do.
#include <colo/booster/booster.h>
#include <colo/engine/gemini_chunk_owner.h>
#include <colo/engine/gemini_model.h>
#include <colo/engine/gemini_state_streamer.h>
#include <colo/booster/plugin.h>
#include <colo/booster/plugin_registry.h>
#include <colo/checkpoint/sharded_safetensors.h>
#include <colo/files/files.h>
#include <colo/dist/process_group.h>
#include <colo/nn/vision_transformer.h>
#include <colo/zero/chunked_parameters.h>
#include <colo/zero/shard_layout.h>
#include <colo/zero/sharded_adam.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "dist_test_env.h"
#include "plugin_equivalence.h"

namespace colo {
namespace {

using namespace test;

constexpr int64_t kGeminiPerRankBatch = 4;
// A step taken after loading a checkpoint, against the step gemini took from the same state:
// per tensor, ||continued - gemini's|| / ||gemini's step||, the error relative to the update
// itself, so that a skipped (or doubled) step is an error of 1, whatever the weights' size.
// MEASURED_BELOW: see CheckpointsRoundTripWithTorchDdpAndLowLevelZeroAcrossWorldSizes.
constexpr double kBf16ContinueTolerance = 0.25;

double step_error(const torch::Tensor& continued, const torch::Tensor& stepped, const torch::Tensor& before) {
  const auto c = continued.detach().to(torch::kCPU, torch::kDouble);
  const auto s = stepped.detach().to(torch::kCPU, torch::kDouble);
  const auto b = before.detach().to(torch::kCPU, torch::kDouble);
  return ((c - s).norm() / (s - b).norm().clamp_min(1e-30)).item<double>();
}

std::shared_ptr<Plugin> gemini_plugin(const PluginOptions& options,
                                      const std::shared_ptr<dist::ProcessGroup>& group = nullptr) {
  return PluginRegistry::global().create("gemini", options, PluginContext{group ? group : world(), device()});
}

std::shared_ptr<torch::optim::Optimizer> gemini_adamw(nn::LayerStack& model) {
  return std::make_shared<torch::optim::AdamW>(model.parameters(),
                                               torch::optim::AdamWOptions(1e-3).eps(1e-3).weight_decay(0.01));
}

// A deeper tiny ViT: more layers than chunks in flight, so that releasing shows.
std::shared_ptr<nn::LayerStack> deep_vit(uint64_t seed = 7) {
  torch::manual_seed(seed);
  auto model = nn::make_vision_transformer(tiny_vit().depth(6));
  model->to(device());
  return model;
}

// The chunks the boosted model holds (and its optimizer borrows).
GeminiChunkOwner& gemini_of(Boosted& b) { return *dynamic_cast<GeminiModel&>(*b.model).chunk_owner(); }

void gemini_step(Boosted& b, const torch::Tensor& images, const torch::Tensor& labels, dist::ProcessGroup& group) {
  b.optimizer->zero_grad();
  auto loss = b.criterion(b.model->forward(shard(images, group.rank(), group.size())),
                          shard(labels, group.rank(), group.size()));
  b.optimizer->backward(loss);
  EXPECT_TRUE(b.optimizer->step());
}

// Each rank holds exactly what the chunk layout predicts: 16 bytes of fp32 state (master,
// gradient, two moments) per element of its shard of every chunk, where the placement says, and
// its shard of the bf16 working parameters; forward never holds more gathered parameters than
// the layers in flight plus the prefetched chunks, and a synchronised backward releases them all.
TEST(Gemini, HoldsWhatTheChunkLayoutPredictsAndGathersOnlyLayersInFlight) {
  for (const char* prefetch : {"0", "2"}) {
    SCOPED_TRACE(fmt::format("max_prefetch={}", prefetch));
    auto plugin = gemini_plugin({{"precision", "bf16"},
                                 {"chunk_size_mb", "0.02"},
                                 {"max_prefetch", prefetch},
                                 {"offload_optim_frac", "0.5"}});
    auto model = deep_vit();
    auto b = plugin->boost({model, gemini_adamw(*model), cross_entropy, nullptr, nullptr});
    auto& optimizer = gemini_of(b);
    auto& chunks = optimizer.chunks();
    ASSERT_GT(chunks.num_chunks(), 3u);

    int64_t state = 0, state_host = 0, shard_bytes = 0, full_bytes = 0;
    for (std::size_t c = 0; c < chunks.num_chunks(); ++c) {
      const auto& layout = chunks.layout(c);
      EXPECT_EQ(optimizer.chunk_state(c).master().numel(), layout.chunk_numel(0));
      const int64_t bytes = 16 * layout.chunk_numel(0);
      state += bytes;
      if (optimizer.placement(c).optim_on_host) state_host += bytes;
      shard_bytes += 2 * layout.chunk_numel(0);
      full_bytes += 2 * layout.padded_bucket_numel(0);
      EXPECT_EQ(layout.chunk_numel(0) * world()->size(), layout.padded_bucket_numel(0));
    }
    EXPECT_GT(state_host, 0);
    EXPECT_LT(state_host, state);
    EXPECT_EQ(optimizer.optimizer_state_device_bytes() + optimizer.optimizer_state_host_bytes(), state);
    // On a CPU the "host" side is the same memory, so the split is by placement flag, not device.
    EXPECT_EQ(chunks.resident_device_bytes() + chunks.resident_host_bytes(), shard_bytes);
    EXPECT_EQ(chunks.gathered_bytes(), 0);  // nothing gathered between steps

    const auto data = make_batches(2, kGeminiPerRankBatch * world()->size());
    chunks.reset_peak();
    auto* wrapped = b.model.get();
    auto out = wrapped->forward(shard(data.images[0]));
    const int64_t after_forward = chunks.gathered_bytes();
    const int64_t forward_peak = chunks.peak_gathered_bytes();
    EXPECT_GT(forward_peak, 0);
    EXPECT_LT(forward_peak, full_bytes);  // never the whole model
    // The bound: widest layer plus the prefetched chunks, at the largest chunk's size.
    int64_t largest = 0, widest = 0;
    for (std::size_t c = 0; c < chunks.num_chunks(); ++c) {
      largest = std::max<int64_t>(largest, 2 * chunks.layout(c).padded_bucket_numel(0));
    }
    std::map<const void*, std::size_t> chunk_of;
    for (std::size_t c = 0; c < chunks.num_chunks(); ++c) {
      for (auto i : chunks.chunk_params(c)) chunk_of[optimizer.params()[i].unsafeGetTensorImpl()] = c;
    }
    for (std::size_t k = 0; k < model->size(); ++k) {
      std::set<std::size_t> used;
      for (const auto& p : model->layer(k)->parameters()) used.insert(chunk_of.at(p.unsafeGetTensorImpl()));
      widest = std::max<int64_t>(widest, static_cast<int64_t>(used.size()));
    }
    EXPECT_LE(forward_peak, (widest + std::stoi(prefetch)) * largest)
        << "forward gathered more than the layers in flight and the prefetched chunks";
    EXPECT_GT(after_forward, 0);  // the last layer's chunks stay for backward
    auto loss = b.criterion(out, shard(data.labels[0]));
    b.optimizer->backward(loss);
    EXPECT_EQ(chunks.gathered_bytes(), 0) << "a synchronised backward releases every chunk";
    EXPECT_TRUE(b.optimizer->step());

    // Evaluation releases every layer's chunks, the last one's too.
    {
      torch::NoGradGuard no_grad;
      chunks.reset_peak();
      wrapped->forward(shard(data.images[1]));
      EXPECT_EQ(chunks.gathered_bytes(), 0);
      EXPECT_LE(chunks.peak_gathered_bytes(), (widest + std::stoi(prefetch)) * largest);
    }
  }
}

// Auto placement keeps optimizer state on the device while the budget allows: none with a tiny
// device, all with a large one, some in between; training is unchanged (the equivalence table).
TEST(Gemini, AutoPlacementFillsTheDeviceBudgetInChunkOrder) {
  const auto data = make_batches(1, kGeminiPerRankBatch * world()->size());
  const PluginOptions chunking{{"chunk_size_mb", "0.05"}};  // fp32: 13107 elements a chunk
  int64_t state_bytes = 0;  // this rank's fp32 optimizer state (the same on every rank)
  {
    auto model = deep_vit();
    auto b = gemini_plugin(chunking)->boost({model, gemini_adamw(*model), cross_entropy, nullptr, nullptr});
    state_bytes = gemini_of(b).optimizer_state_device_bytes() + gemini_of(b).optimizer_state_host_bytes();
  }
  // What placement takes first (resident parameters and the step's working memory: 0 on CPU
  // ranks, where fp32 parameter shards are the masters themselves; on a GPU the activations and
  // cuBLAS's workspace), measured by a run whose budget holds everything.
  int64_t overhead = 0;
  {
    auto options = chunking;
    options["placement_policy"] = "auto";
    options["device_memory_mb"] = "1000000";
    auto model = deep_vit();
    auto b = gemini_plugin(options)->boost({model, gemini_adamw(*model), cross_entropy, nullptr, nullptr});
    gemini_step(b, data.images[0], data.labels[0], *world());
    overhead = gemini_of(b).placement_overhead_bytes();
    EXPECT_GE(overhead, 0);
  }
  // Beyond that overhead, optimizer state room of 64 bytes, of about half the state (at the default
  // steady_cuda_cap_ratio 0.9), of ten times it.
  std::vector<std::size_t> on_device;
  std::size_t num_chunks = 0;
  for (double share : {64.0 / static_cast<double>(state_bytes), 0.5 / 0.9, 10.0}) {
    const double megabytes =
        (share * static_cast<double>(state_bytes) + static_cast<double>(overhead) / 0.9) / (1024.0 * 1024.0);
    SCOPED_TRACE(fmt::format("device_memory_mb={}", megabytes));
    auto options = chunking;
    options["placement_policy"] = "auto";
    options["device_memory_mb"] = fmt::format("{}", megabytes);
    auto model = deep_vit();
    auto b = gemini_plugin(options)->boost({model, gemini_adamw(*model), cross_entropy, nullptr, nullptr});
    auto& optimizer = gemini_of(b);
    EXPECT_FALSE(optimizer.placement_settled());
    gemini_step(b, data.images[0], data.labels[0], *world());
    EXPECT_TRUE(optimizer.placement_settled());
    std::size_t count = 0;
    int64_t device_bytes = 0;
    num_chunks = optimizer.chunks().num_chunks();
    for (std::size_t c = 0; c < optimizer.chunks().num_chunks(); ++c) {
      if (optimizer.placement(c).optim_on_host) continue;
      ++count;
      device_bytes += 16 * optimizer.chunks().layout(c).chunk_numel(0);
    }
    EXPECT_LE(device_bytes, static_cast<int64_t>(0.9 * share * static_cast<double>(state_bytes)) + 1);
    on_device.push_back(count);
  }
  ASSERT_EQ(on_device.size(), 3u);
  EXPECT_EQ(on_device[0], 0u) << "no chunk's state fits";
  EXPECT_GT(on_device[1], 0u);
  EXPECT_LT(on_device[1], on_device[2]);
  EXPECT_EQ(on_device[2], num_chunks) << "every chunk's state fits ten times the state";
}

// Checkpoints: gemini over the world saves; torch_ddp over half the world and low_level_zero over
// the world load exactly what was saved and continue as gemini does; gemini over half the world
// loads low_level_zero's checkpoint.
TEST(Gemini, CheckpointsRoundTripWithTorchDdpAndLowLevelZeroAcrossWorldSizes) {
  const int half = std::max(1, world()->size() / 2);
  const auto data = make_batches(3, kGeminiPerRankBatch * world()->size());
  const auto dir = shared_directory("gemini_ckpt_dir");
  auto plugin = gemini_plugin({{"precision", "bf16"}, {"offload_optim_frac", "0.5"}, {"chunk_size_mb", "0.02"}});
  Booster booster(plugin);
  auto model = make_vit();
  auto b = booster.boost(model, gemini_adamw(*model), cross_entropy);
  for (int i = 0; i < 2; ++i) gemini_step(b, data.images[i], data.labels[i], *world());
  booster.save_model(*b.model, dir);
  booster.save_optimizer(*b.optimizer, dir);
  const auto saved_model = named_state(b.model->full_state());
  const auto saved_optimizer = named_state(b.optimizer->full_state().tensors);
  EXPECT_EQ(saved_optimizer.count("master.head.weight"), 1u);
  gemini_step(b, data.images[2], data.labels[2], *world());
  const auto gemini_after = named_state(b.model->full_state());

  const auto expect_same = [](const NamedTensors& got, const std::map<std::string, torch::Tensor>& want,
                              const std::string& what) {
    EXPECT_EQ(got.size(), want.size()) << what;
    for (const auto& [name, tensor] : got) {
      auto it = want.find(name);
      if (it == want.end()) {
        ADD_FAILURE() << what << ": unexpected " << name;
        continue;
      }
      EXPECT_TRUE(torch::equal(tensor.to(torch::kCPU), it->second.to(torch::kCPU))) << what << ": " << name;
    }
  };
  std::shared_ptr<dist::ProcessGroup> sub;
  if (world()->rank() < half) {
    std::vector<int> ranks(half);
    for (int r = 0; r < half; ++r) ranks[r] = r;
    sub = world()->new_subgroup(ranks, "gemini_half");
  }
  if (sub) {
    auto ddp = PluginRegistry::global().create("torch_ddp", {{"precision", "bf16"}}, PluginContext{sub, device()});
    Booster ddp_booster(ddp);
    auto ddp_model = make_vit(/*seed=*/99);
    auto db = ddp_booster.boost(ddp_model, gemini_adamw(*ddp_model), cross_entropy);
    ddp_booster.load_model(*db.model, dir);
    ddp_booster.load_optimizer(*db.optimizer, dir);
    expect_same(db.model->full_state(), saved_model, "model under torch_ddp");
    expect_same(db.optimizer->full_state().tensors, saved_optimizer, "optimizer under torch_ddp");
  }
  {
    auto zero = PluginRegistry::global().create("low_level_zero", {{"precision", "bf16"}, {"stage", "2"}},
                                                PluginContext{world(), device()});
    Booster zero_booster(zero);
    auto zero_model = make_vit(/*seed=*/99);
    auto zb = zero_booster.boost(zero_model, gemini_adamw(*zero_model), cross_entropy);
    zero_booster.load_model(*zb.model, dir);
    zero_booster.load_optimizer(*zb.optimizer, dir);
    expect_same(zb.model->full_state(), saved_model, "model under low_level_zero");
    expect_same(zb.optimizer->full_state().tensors, saved_optimizer, "optimizer under low_level_zero");
    // low_level_zero continues as gemini did. Within bf16's reach: the gradients are rounded to bf16
    // and summed in another order (buckets against chunks), and Adam turns differences of rounding
    // size into updates of up to lr (measured <= 6e-3 relative).
    gemini_step(zb, data.images[2], data.labels[2], *world());
    double worst = 0;
    for (const auto& [name, tensor] : zb.model->full_state()) {
      const double e = step_error(tensor, gemini_after.at(name), saved_model.at(name));
      worst = std::max(worst, e);
      EXPECT_LE(e, kBf16ContinueTolerance) << name;
    }
    if (world()->rank() == 0) std::cout << "[measured] low_level_zero's step against gemini's: " << worst << "\n";
  }
  world()->barrier().wait();
  // And back: gemini over half the world loads the checkpoint and continues identically.
  if (sub) {
    auto again = gemini_plugin({{"precision", "bf16"}}, sub);
    Booster again_booster(again);
    auto again_model = make_vit(/*seed=*/99);
    auto ab = again_booster.boost(again_model, gemini_adamw(*again_model), cross_entropy);
    again_booster.load_model(*ab.model, dir);
    again_booster.load_optimizer(*ab.optimizer, dir);
    expect_same(ab.model->full_state(), saved_model, "model under gemini on fewer ranks");
    expect_same(ab.optimizer->full_state().tensors, saved_optimizer, "optimizer under gemini on fewer ranks");
    gemini_step(ab, data.images[2], data.labels[2], *sub);
    double worst = 0;
    for (const auto& [name, tensor] : ab.model->full_state()) {
      const double e = step_error(tensor, gemini_after.at(name), saved_model.at(name));
      worst = std::max(worst, e);
      EXPECT_LE(e, kBf16ContinueTolerance) << name;
    }
    if (world()->rank() == 0) std::cout << "[measured] gemini's step on fewer ranks against gemini's: " << worst << "\n";
  }
  remove_shared_directory(dir);
}

// Gradient accumulation: under no_sync no reduce-scatter releases chunks, so backward releases
// each chunk as soon as no earlier layer needs it; after backward only the first layer's chunks
// are gathered, and during it never more than two layers' chunks (the one running and the one
// just passed) plus the prefetched ones.
TEST(Gemini, BackwardUnderNoSyncReleasesChunksAsItGoes) {
  auto plugin = gemini_plugin({{"precision", "bf16"}, {"chunk_size_mb", "0.02"}, {"max_prefetch", "1"}});
  Booster booster(plugin);
  auto model = deep_vit();
  auto b = booster.boost(model, gemini_adamw(*model), cross_entropy);
  auto& optimizer = gemini_of(b);
  auto& chunks = optimizer.chunks();
  std::map<const void*, std::size_t> chunk_of;
  int64_t largest = 0;
  for (std::size_t c = 0; c < chunks.num_chunks(); ++c) {
    for (auto i : chunks.chunk_params(c)) chunk_of[optimizer.params()[i].unsafeGetTensorImpl()] = c;
    largest = std::max<int64_t>(largest, 2 * chunks.layout(c).padded_bucket_numel(0));
  }
  std::set<std::size_t> first_layer;
  std::size_t widest = 0;
  for (std::size_t k = 0; k < model->size(); ++k) {
    std::set<std::size_t> used;
    for (const auto& p : model->layer(k)->parameters()) used.insert(chunk_of.at(p.unsafeGetTensorImpl()));
    if (k == 0) first_layer = used;
    widest = std::max(widest, used.size());
  }
  int64_t first_layer_bytes = 0;
  for (auto c : first_layer) first_layer_bytes += 2 * chunks.layout(c).padded_bucket_numel(0);
  ASSERT_GT(chunks.num_chunks(), 2 * widest + 1) << "the model must be deeper than the window";

  const auto data = make_batches(2, kGeminiPerRankBatch * world()->size());
  b.optimizer->zero_grad();
  {
    auto guard = booster.no_sync(*b.model, *b.optimizer);
    auto loss = b.criterion(b.model->forward(shard(data.images[0])), shard(data.labels[0]));
    chunks.reset_peak();
    booster.backward(loss, *b.optimizer);
    EXPECT_EQ(chunks.gathered_bytes(), first_layer_bytes);
    EXPECT_LE(chunks.peak_gathered_bytes(), static_cast<int64_t>(2 * widest + 1) * largest);
  }
  // The synchronised pass reduces the sum and trains on.
  auto loss = b.criterion(b.model->forward(shard(data.images[1])), shard(data.labels[1]));
  booster.backward(loss, *b.optimizer);
  EXPECT_EQ(chunks.gathered_bytes(), 0);
  EXPECT_TRUE(b.optimizer->step());
}

// Accumulation without no_sync (every micro-batch reduce-scattered and added into the shards, as
// DDP and FSDP allow; colo_vit_bench --sync-every-microbatch) must train as accumulation under
// no_sync does: the same sum of four micro-batches' gradients. fp32, every tensor randomised; the
// two differ only in where the sum is rounded (measured 3e-8; a pass that overwrote instead of
// adding: 2e-3).
TEST(Gemini, SynchronisedMicroBatchesAccumulateAsUnderNoSync) {
  const auto data = make_batches(2, kGeminiPerRankBatch * world()->size());
  auto train = [&](bool first_under_no_sync) {
    auto plugin = gemini_plugin({{"chunk_size_mb", "0.05"}});
    Booster booster(plugin);
    auto model = deep_vit();
    {
      torch::NoGradGuard no_grad;
      torch::manual_seed(3);
      for (auto& p : model->parameters()) p.add_(0.1 * torch::randn_like(p));
    }
    auto b = booster.boost(model, gemini_adamw(*model), cross_entropy);
    b.optimizer->zero_grad();
    for (int m = 0; m < 4; ++m) {
      std::optional<NoSyncGuard> guard;
      if (first_under_no_sync && m < 3) guard.emplace(booster.no_sync(*b.model, *b.optimizer));
      auto loss = b.criterion(b.model->forward(shard(data.images[m % 2])), shard(data.labels[m % 2])) / 4.0;
      booster.backward(loss, *b.optimizer);
    }
    EXPECT_TRUE(b.optimizer->step());
    return GeminiStateStreamer(gemini_of(b)).full_masters();
  };
  const auto accumulated = train(true);
  const auto synchronised = train(false);
  ASSERT_EQ(accumulated.size(), synchronised.size());
  double worst = 0.0;
  for (std::size_t i = 0; i < accumulated.size(); ++i) {
    ASSERT_EQ(accumulated[i].first, synchronised[i].first);
    const auto a = accumulated[i].second.to(torch::kCPU, torch::kDouble);
    const auto s = synchronised[i].second.to(torch::kCPU, torch::kDouble);
    worst = std::max(worst, (a - s).abs().max().item<double>());
  }
  // One Adam step moves each weight by about lr (1e-3); rounding differences stay near 1e-7.
  EXPECT_LE(worst, 1e-5) << "the weights after synchronised micro-batches differ from no_sync's";
}

// Saved in several files (SaveOptions::shard) chunk by chunk, the set loads under low_level_zero
// and back under gemini with the same values.
TEST(Gemini, ShardedCheckpointFilesLoadUnderOtherPlugins) {
  const auto dir = shared_directory("gemini_sharded_ckpt");
  const auto data = make_batches(1, kGeminiPerRankBatch * world()->size());
  auto plugin = gemini_plugin({{"precision", "bf16"}, {"chunk_size_mb", "0.02"}, {"offload_optim_frac", "0.5"}});
  Booster booster(plugin);
  auto model = make_vit();
  auto b = booster.boost(model, gemini_adamw(*model), cross_entropy);
  gemini_step(b, data.images[0], data.labels[0], *world());
  SaveOptions sharded;
  sharded.shard(true);
  sharded.max_shard_mb(0.02);
  booster.save_model(*b.model, dir, sharded);
  booster.save_optimizer(*b.optimizer, dir, sharded);
  // Several files and their index, every tensor listed in their headers.
  EXPECT_TRUE(files::exists(files::join(dir, "model.safetensors.index.json")));
  EXPECT_EQ(checkpoint::list_safetensors_set(dir, "model").size(), b.model->full_state().size());
  const auto saved_model = named_state(b.model->full_state());
  const auto saved_optimizer = named_state(b.optimizer->full_state().tensors);

  auto zero = PluginRegistry::global().create("low_level_zero", {{"precision", "bf16"}}, PluginContext{world(), device()});
  Booster zero_booster(zero);
  auto zero_model = make_vit(/*seed=*/99);
  auto zb = zero_booster.boost(zero_model, gemini_adamw(*zero_model), cross_entropy);
  zero_booster.load_model(*zb.model, dir);
  zero_booster.load_optimizer(*zb.optimizer, dir);
  for (const auto& [name, tensor] : zb.model->full_state()) {
    EXPECT_TRUE(torch::equal(tensor.cpu(), saved_model.at(name).cpu())) << name;
  }
  for (const auto& [name, tensor] : zb.optimizer->full_state().tensors) {
    EXPECT_TRUE(torch::equal(tensor.cpu(), saved_optimizer.at(name).cpu())) << name;
  }
  auto again = gemini_plugin({{"precision", "bf16"}, {"chunk_size_mb", "0.05"}});
  Booster again_booster(again);
  auto again_model = make_vit(/*seed=*/5);
  auto ab = again_booster.boost(again_model, gemini_adamw(*again_model), cross_entropy);
  again_booster.load_model(*ab.model, dir);
  again_booster.load_optimizer(*ab.optimizer, dir);
  for (const auto& [name, tensor] : ab.optimizer->full_state().tensors) {
    EXPECT_TRUE(torch::equal(tensor.cpu(), saved_optimizer.at(name).cpu())) << name;
  }
  world()->barrier().wait();
  remove_shared_directory(dir);
}

TEST(Gemini, RejectsWhatItCannotDoWithMessagesThatSayWhatToChange) {
  const auto expect_error = [](const PluginOptions& options, std::vector<std::string> needles) {
    try {
      gemini_plugin(options);
      ADD_FAILURE() << "expected an error";
    } catch (const std::invalid_argument& e) {
      for (const auto& needle : needles) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << needle << " not in: " << e.what();
      }
    }
  };
  expect_error({{"shard_param_frac", "1.5"}, {"offload_optim_frac", "-0.1"}, {"chunk_size", "4"}},
               {"shard_param_frac must lie in [0, 1], got 1.5", "offload_optim_frac must lie in [0, 1]",
                "unknown option 'chunk_size'", "chunk_size_mb"});
  expect_error({{"shard_param_frac", "0.5"}, {"offload_param_frac", "0.5"}},
               {"offload_param_frac=0.5 needs shard_param_frac=1"});
  expect_error({{"placement_policy", "auto"}, {"offload_optim_frac", "0.5"}}, {"placement_policy=static"});

  // A chunk smaller than the largest parameter: the message names the parameter and a size that holds it.
  auto plugin = gemini_plugin({{"chunk_size_mb", "0.001"}});
  auto model = make_vit();
  try {
    plugin->boost({model, gemini_adamw(*model), cross_entropy, nullptr, nullptr});
    ADD_FAILURE() << "expected an error";
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("cannot hold parameter '"), std::string::npos) << message;
    EXPECT_NE(message.find("set chunk_size_mb to at least"), std::string::npos) << message;
  }
  // An optimizer gemini cannot shard: the message lists those it can; nothing was changed.
  auto fresh = make_vit();
  auto sgd = std::make_shared<torch::optim::SGD>(fresh->parameters(), torch::optim::SGDOptions(0.1));
  try {
    gemini_plugin({})->boost({fresh, sgd, cross_entropy, nullptr, nullptr});
    ADD_FAILURE() << "expected an error";
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    for (const char* needle : {"gemini", "SGD", "torch::optim::Adam", "AdamW", "HybridAdam"}) {
      EXPECT_NE(message.find(needle), std::string::npos) << needle << " not in: " << message;
    }
  }
  EXPECT_EQ(fresh->parameters().front().scalar_type(), torch::kFloat);
}

}  // namespace
}  // namespace colo
