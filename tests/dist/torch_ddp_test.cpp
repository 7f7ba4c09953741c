// torch_ddp against single-process training. Every rank trains its shard of each global batch
// through the plugin, and also computes the single-process reference itself (same seed, the
// whole global batch, a plain torch optimizer, no plugin), so each rank can compare locally.
//
// Tolerances:
//   fp32   1e-5 relative (losses, and weights as max|a-b| / max|b| per tensor): the two runs
//          differ only in the order of floating-point sums (per-shard means averaged by the
//          all-reduce vs one mean over the global batch), ~1e-7 per step, kept that small by
//          an optimizer linear in the gradients (see make_sgd).
//   bf16   losses 5e-3 relative, weights 5e-2 (same measure): bf16 keeps 8 significant bits
//          (unit roundoff 2^-9 ~ 2e-3) and activations and gradients are rounded at every op,
//          so the gradients, hence the updates, are off by ~1%. Measured over 5 steps at 2 and
//          4 ranks: losses 3e-4, weights 1.2e-2, the worst being zero-initialised biases whose
//          whole value is accumulated updates. Without fp32 masters, updates below half a bf16
//          ulp of a weight (~2e-4 here) would be lost: errors of tens of percent.
#include <colo/booster/mixed_precision_optimizer.h>
#include <colo/booster/plugin.h>
#include <colo/booster/plugin_registry.h>
#include <colo/data/data_loader.h>
#include <colo/data/synthetic_dataset.h>
#include <colo/dist/device.h>
#include <colo/dist/environment.h>
#include <colo/dist/process_group.h>
#include <colo/nn/layer.h>
#include <colo/nn/layer_stack.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "dist_test_env.h"
#include "plugin_equivalence.h"

namespace colo {
namespace {

// The shared pieces of every plugin-equivalence test (plugin_equivalence.h), device() and world().
using namespace test;

constexpr int64_t kPerRankBatch = 4;
constexpr int kSteps = 5;
constexpr double kLr = 1e-3;

// The equivalence tests use SGD with momentum: it is linear in the gradients, so the runs'
// rounding differences stay at rounding size. Adam divides each gradient by its running RMS,
// which turns the pure rounding noise of gradients that are zero in exact arithmetic (the
// attention's key bias) into full-size updates of either sign.
std::shared_ptr<torch::optim::Optimizer> make_sgd(nn::LayerStack& model) {
  return std::make_shared<torch::optim::SGD>(model.parameters(),
                                             torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-4));
}

std::shared_ptr<torch::optim::Optimizer> make_adamw(nn::LayerStack& model, double weight_decay = 0.01) {
  return std::make_shared<torch::optim::AdamW>(model.parameters(),
                                               torch::optim::AdamWOptions(kLr).weight_decay(weight_decay));
}

std::shared_ptr<Plugin> make_plugin(const PluginOptions& options) {
  return PluginRegistry::global().create("torch_ddp", options, PluginContext{world(), device()});
}

// Single-process training on the global batches.
Trajectory train_reference(nn::LayerStack& model, torch::optim::Optimizer& optimizer, const GlobalBatches& data,
                           double max_grad_norm = 0.0) {
  Trajectory t;
  for (std::size_t i = 0; i < data.images.size(); ++i) {
    optimizer.zero_grad();
    auto loss = cross_entropy(model.forward(data.images[i]), data.labels[i]);
    loss.backward();
    if (max_grad_norm > 0) t.grad_norms.push_back(torch::nn::utils::clip_grad_norm_(model.parameters(), max_grad_norm));
    optimizer.step();
    t.losses.push_back(loss.item<double>());
  }
  return t;
}

// fp32 data parallelism == single-process training, for a given set of plugin options.
void check_fp32_equivalence(const PluginOptions& options) {
  const auto data = make_batches(kSteps, kPerRankBatch * world()->size());
  auto reference = make_vit();
  auto reference_opt = make_sgd(*reference);
  const auto want = train_reference(*reference, *reference_opt, data);

  auto plugin = make_plugin(options);
  auto model = make_vit();
  auto b = plugin->boost({model, make_sgd(*model), cross_entropy, nullptr, nullptr});
  const auto got = train_boosted(*plugin, b, data);
  expect_losses_near(got, want, 1e-5);
  expect_weights_near(*b.model, *reference, 1e-5);
}

TEST(TorchDdp, Fp32MatchesSingleProcess) { check_fp32_equivalence({}); }

TEST(TorchDdp, WithoutBucketViewsMatchesSingleProcess) {
  check_fp32_equivalence({{"gradient_as_bucket_view", "false"}});
}

TEST(TorchDdp, CommunicationAfterBackwardMatchesSingleProcess) {
  check_fp32_equivalence({{"overlap_communication", "false"}, {"bucket_cap_mb", "0.001"}});
}

TEST(TorchDdp, ManySmallBucketsMatchSingleProcess) {
  // ~1 KB buckets: one or two parameters each, dozens of all-reduces per backward.
  check_fp32_equivalence({{"bucket_cap_mb", "0.001"}});
  check_fp32_equivalence({{"bucket_cap_mb", "0.001"}, {"gradient_as_bucket_view", "false"}});
}

TEST(TorchDdp, DifferentInitialisationsStartFromRankZeros) {
  // Each rank initialises differently; boost must broadcast rank 0's weights.
  const auto data = make_batches(2, kPerRankBatch * world()->size());
  auto reference = make_vit(/*seed=*/7);
  auto reference_opt = make_sgd(*reference);
  const auto want = train_reference(*reference, *reference_opt, data);

  auto plugin = make_plugin({});
  auto model = make_vit(/*seed=*/7 + 100 * world()->rank());
  auto b = plugin->boost({model, make_sgd(*model), cross_entropy, nullptr, nullptr});
  const auto got = train_boosted(*plugin, b, data);
  expect_losses_near(got, want, 1e-5);
  expect_weights_near(*b.model, *reference, 1e-5);
}

TEST(TorchDdp, GradientClippingMatchesTorchClipGradNorm) {
  constexpr double kMaxNorm = 0.05;
  const auto data = make_batches(kSteps, kPerRankBatch * world()->size());
  auto reference = make_vit();
  auto reference_opt = make_sgd(*reference);
  const auto want = train_reference(*reference, *reference_opt, data, kMaxNorm);
  for (double norm : want.grad_norms) ASSERT_GT(norm, kMaxNorm) << "the test must clip";

  auto plugin = make_plugin({{"max_grad_norm", std::to_string(kMaxNorm)}});
  auto model = make_vit();
  auto b = plugin->boost({model, make_sgd(*model), cross_entropy, nullptr, nullptr});
  EXPECT_EQ(b.optimizer->max_grad_norm(), kMaxNorm);
  const auto got = train_boosted(*plugin, b, data);
  expect_losses_near(got, want, 1e-5);
  for (std::size_t i = 0; i < want.grad_norms.size(); ++i) {
    EXPECT_NEAR(got.grad_norms[i], want.grad_norms[i], 1e-5 * want.grad_norms[i]) << "step " << i;
  }
  expect_weights_near(*b.model, *reference, 1e-5);
}

TEST(TorchDdp, NoSyncAccumulationEqualsOneStepOnTheLargerBatch) {
  constexpr int kMicro = 4;
  for (const char* view : {"true", "false"}) {
    const auto data = make_batches(2, kMicro * kPerRankBatch * world()->size());
    auto reference = make_vit();
    auto reference_opt = make_sgd(*reference);
    const auto want = train_reference(*reference, *reference_opt, data);

    auto plugin = make_plugin({{"gradient_as_bucket_view", view}});
    auto model = make_vit();
    auto b = plugin->boost({model, make_sgd(*model), cross_entropy, nullptr, nullptr});
    for (std::size_t step = 0; step < data.images.size(); ++step) {
      // Micro-batch m of rank r: rows of the global batch that rank r owns, split in kMicro.
      const auto images = shard(data.images[step]).chunk(kMicro);
      const auto labels = shard(data.labels[step]).chunk(kMicro);
      b.optimizer->zero_grad();
      double loss_sum = 0;
      for (int m = 0; m < kMicro; ++m) {
        auto micro = [&] {
          auto loss = b.criterion(b.model->forward(images[m]), labels[m]) / kMicro;
          plugin->backward(loss, *b.optimizer);
          loss_sum += loss.item<double>();
        };
        if (m + 1 < kMicro) {
          auto guard = plugin->no_sync(*b.model, *b.optimizer);
          micro();
        } else {
          micro();
        }
      }
      EXPECT_TRUE(b.optimizer->step());
      const double loss = global_mean(loss_sum);
      EXPECT_LE(std::abs(loss - want.losses[step]) / want.losses[step], 1e-5) << "view=" << view;
    }
    expect_weights_near(*b.model, *reference, 1e-5);
  }
}

TEST(TorchDdp, Bf16TracksTheFp32Reference) {
  const auto data = make_batches(kSteps, kPerRankBatch * world()->size());
  auto reference = make_vit();
  auto reference_opt = make_sgd(*reference);
  const auto want = train_reference(*reference, *reference_opt, data);

  auto plugin = make_plugin({{"precision", "bf16"}});
  auto model = make_vit();
  auto b = plugin->boost({model, make_sgd(*model), cross_entropy, nullptr, nullptr});
  // Working weights are bf16; the optimizer steps fp32 masters, and its state is fp32.
  EXPECT_EQ(model->parameters().front().scalar_type(), torch::kBFloat16);
  EXPECT_EQ(b.optimizer->optimizer().param_groups().front().params().front().scalar_type(), torch::kFloat);
  const auto got = train_boosted(*plugin, b, data);
  expect_losses_near(got, want, 5e-3);
  expect_weights_near(*b.model, *reference, 5e-2);
  // The saved weights are the fp32 masters.
  for (const auto& [name, tensor] : b.model->full_state()) EXPECT_EQ(tensor.scalar_type(), torch::kFloat) << name;
  // The replicas are identical, bit for bit.
  for (const auto& [name, tensor] : b.model->full_state()) {
    auto mine = tensor.clone();
    auto first = tensor.clone();
    world()->broadcast(first, 0).wait();
    EXPECT_TRUE(torch::equal(mine, first)) << name;
  }
}

// A resumed bf16 run continues bit-exactly: fp32 masters and optimizer state are saved.
TEST(TorchDdp, Bf16ResumeFromFullStateIsExact) {
  const auto data = make_batches(4, kPerRankBatch * world()->size());
  auto run = [&](Plugin& plugin, Boosted& b, std::size_t from, std::size_t to) {
    for (std::size_t i = from; i < to; ++i) {
      b.optimizer->zero_grad();
      auto loss = b.criterion(b.model->forward(shard(data.images[i])), shard(data.labels[i]));
      plugin.backward(loss, *b.optimizer);
      b.optimizer->step();
    }
  };
  auto plugin = make_plugin({{"precision", "bf16"}});
  auto model = make_vit();
  auto b = plugin->boost({model, make_adamw(*model), cross_entropy, nullptr, nullptr});
  run(*plugin, b, 0, 2);
  auto saved_model = b.model->full_state();
  for (auto& [name, t] : saved_model) t = t.clone();
  auto saved_optimizer = b.optimizer->full_state();
  for (auto& [name, t] : saved_optimizer.tensors) t = t.clone();
  EXPECT_GT(saved_optimizer.tensors.size(), 0u);
  EXPECT_EQ(saved_optimizer.scalars.at("lr.0"), kLr);
  run(*plugin, b, 2, 4);

  auto plugin2 = make_plugin({{"precision", "bf16"}});
  auto model2 = make_vit(/*seed=*/99);
  auto b2 = plugin2->boost({model2, make_adamw(*model2), cross_entropy, nullptr, nullptr});
  b2.model->load_full_state(saved_model);
  b2.optimizer->load_full_state(saved_optimizer);
  run(*plugin2, b2, 2, 4);
  const auto want = named_state(b.model->full_state());
  for (const auto& [name, tensor] : b2.model->full_state()) EXPECT_TRUE(torch::equal(tensor, want.at(name))) << name;
  const auto want_opt = b.optimizer->full_state();
  const auto got_opt = named_state(b2.optimizer->full_state().tensors);
  for (const auto& [name, tensor] : want_opt.tensors) EXPECT_TRUE(torch::equal(tensor, got_opt.at(name))) << name;
}

TEST(TorchDdp, LoadFullStateReportsEveryBadEntry) {
  auto plugin = make_plugin({{"precision", "bf16"}});
  auto model = make_vit();
  auto b = plugin->boost({model, make_adamw(*model), cross_entropy, nullptr, nullptr});
  const auto data = make_batches(1, kPerRankBatch * world()->size());
  plugin->backward(b.criterion(b.model->forward(shard(data.images[0])), shard(data.labels[0])), *b.optimizer);
  b.optimizer->step();
  auto state = b.optimizer->full_state();
  for (auto& [name, t] : state.tensors) {
    if (name == "head.weight.exp_avg") t = torch::zeros({3});
  }
  state.tensors.erase(std::remove_if(state.tensors.begin(), state.tensors.end(),
                                     [](const auto& e) { return e.first == "master.cls_token"; }),
                      state.tensors.end());
  state.tensors.emplace_back("nonexistent.exp_avg", torch::zeros({1}));
  state.scalars.erase("lr.0");
  auto before = named_state(b.optimizer->full_state().tensors);
  for (auto& [name, t] : before) t = t.clone();
  try {
    b.optimizer->load_full_state(state);
    ADD_FAILURE() << "expected an error";
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    for (const char* needle : {"head.weight.exp_avg", "master.cls_token", "nonexistent.exp_avg", "lr.0"}) {
      EXPECT_NE(message.find(needle), std::string::npos) << needle << " not in: " << message;
    }
  }
  // Nothing changed.
  for (const auto& [name, tensor] : b.optimizer->full_state().tensors) {
    EXPECT_TRUE(torch::equal(tensor, before.at(name))) << name;
  }
}

std::shared_ptr<nn::LayerStack> make_scale_shift_stack() {
  torch::manual_seed(5);
  auto model = std::make_shared<nn::LayerStack>();
  model->push_back(std::make_shared<ScaleShift>(8, 0));
  model->push_back(std::make_shared<ScaleShift>(8, 1));
  model->to(device());
  return model;
}

torch::Tensor mse(const torch::Tensor& output, const torch::Tensor& target) { return (output - target).pow(2).mean(); }

TEST(TorchDdp, Fp16OverflowOnOneRankSkipsTheStepOnAllRanks) {
  auto plugin = make_plugin({{"precision", "fp16"}, {"initial_scale", "1024"}, {"hysteresis", "1"}});
  auto model = make_scale_shift_stack();
  auto b =
      plugin->boost({model, std::make_shared<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.1)),
                     mse, nullptr, nullptr});
  EXPECT_EQ(model->parameters().front().scalar_type(), torch::kHalf);
  torch::manual_seed(13);
  const auto x = torch::randn({kPerRankBatch * world()->size(), 8}).to(device());
  const auto y = torch::randn({kPerRankBatch * world()->size(), 8}).to(device());
  auto step = [&](bool poison_one_rank) {
    b.optimizer->zero_grad();
    plugin->backward(b.criterion(b.model->forward(shard(x)), shard(y)), *b.optimizer);
    // After the all-reduce: only the last rank sees an inf, so only a consensus can skip everywhere.
    if (poison_one_rank && world()->rank() == world()->size() - 1) {
      torch::NoGradGuard no_grad;
      model->parameters().front().grad()[0] = std::numeric_limits<float>::infinity();
    }
    return b.optimizer->step();
  };
  auto before = named_state(b.model->full_state());
  for (auto& [name, t] : before) t = t.clone();
  EXPECT_FALSE(step(/*poison_one_rank=*/true));
  EXPECT_EQ(b.optimizer->skipped_steps(), 1);
  const auto* scaler = dynamic_cast<MixedPrecisionOptimizer&>(*b.optimizer).loss_scaler();
  ASSERT_NE(scaler, nullptr);
  EXPECT_EQ(scaler->scale(), 512.0);  // hysteresis 1: backed off at once
  for (const auto& [name, tensor] : b.model->full_state()) EXPECT_TRUE(torch::equal(tensor, before.at(name))) << name;

  EXPECT_TRUE(step(false));
  EXPECT_EQ(b.optimizer->skipped_steps(), 1);
  for (const auto& [name, tensor] : b.model->full_state()) {
    EXPECT_FALSE(torch::equal(tensor, before.at(name))) << name;
    auto first = tensor.clone();
    world()->broadcast(first, 0).wait();
    EXPECT_TRUE(torch::equal(tensor, first)) << name;
  }
}

TEST(TorchDdp, Fp16LossScaleOverflowSkipsAndBacksOff) {
  // 2^24 (the largest scale allowed by default) times a loss gradient of order 1 exceeds
  // fp16's largest value (65504) as soon as the gradient is cast to fp16.
  auto plugin = make_plugin({{"precision", "fp16"}, {"initial_scale", "16777216"}, {"hysteresis", "2"}});
  auto model = make_scale_shift_stack();
  auto b =
      plugin->boost({model, std::make_shared<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.1)),
                     mse, nullptr, nullptr});
  torch::manual_seed(13);
  const auto x = torch::randn({kPerRankBatch * world()->size(), 8}).to(device());
  const auto y = torch::randn({kPerRankBatch * world()->size(), 8}).to(device());
  auto& mixed = dynamic_cast<MixedPrecisionOptimizer&>(*b.optimizer);
  const auto* scaler = mixed.loss_scaler();
  int pre_step_calls = 0;
  mixed.set_pre_step_hook([&pre_step_calls] { ++pre_step_calls; });
  for (int i = 0; i < 2; ++i) {
    b.optimizer->zero_grad();
    plugin->backward(b.criterion(b.model->forward(shard(x)), shard(y)), *b.optimizer);
    EXPECT_FALSE(b.optimizer->step());
  }
  EXPECT_EQ(b.optimizer->skipped_steps(), 2);
  EXPECT_EQ(pre_step_calls, 2);  // before skipped steps too: a plugin may need it to finish communication
  EXPECT_EQ(scaler->scale(), std::ldexp(1.0, 23));  // the first overflow is absorbed by hysteresis
}

// A model with a layer whose parameters never reach the loss.
class PartlyUsed : public nn::Layer {
 public:
  PartlyUsed() {
    used = register_module("used", torch::nn::Linear(8, 4));
    unused = register_module("unused", torch::nn::Linear(8, 4));
  }
  torch::Tensor forward(const torch::Tensor& x) override { return used(x); }
  torch::nn::Linear used{nullptr}, unused{nullptr};
};

std::shared_ptr<nn::LayerStack> make_partly_used(uint64_t seed = 17) {
  torch::manual_seed(seed);
  auto model = std::make_shared<nn::LayerStack>();
  model->push_back(std::make_shared<PartlyUsed>());
  model->to(device());
  return model;
}

TEST(TorchDdp, UnusedParametersNeedFindUnusedParameters) {
  if (world()->size() == 1) {
    GTEST_SKIP() << "a world of one reduces nothing (no buckets): unused parameters need no handling";
  }
  torch::manual_seed(19);
  const auto x = torch::randn({kPerRankBatch * world()->size(), 8}).to(device());
  const auto y = torch::randint(0, 4, {kPerRankBatch * world()->size()}).to(device());
  {
    auto plugin = make_plugin({});
    auto model = make_partly_used();
    auto b = plugin->boost({model, make_adamw(*model), cross_entropy, nullptr, nullptr});
    try {
      plugin->backward(b.criterion(b.model->forward(shard(x)), shard(y)), *b.optimizer);
      ADD_FAILURE() << "expected an error naming the unused parameters";
    } catch (const std::exception& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("unused.weight"), std::string::npos) << message;
      EXPECT_NE(message.find("find_unused_parameters=true"), std::string::npos) << message;
    }
  }
  for (const char* view : {"true", "false"}) {
    // Without bucket views an unused parameter keeps no gradient, so AdamW (with weight decay)
    // leaves it alone as in single-process training; with views its gradient is a zero, which
    // weight decay would shrink, so that case runs without weight decay.
    const double decay = std::string(view) == "true" ? 0.0 : 0.01;
    auto reference = make_partly_used();
    auto reference_opt = make_adamw(*reference, decay);
    auto model = make_partly_used();
    auto plugin = make_plugin({{"find_unused_parameters", "true"}, {"gradient_as_bucket_view", view}});
    auto b = plugin->boost({model, make_adamw(*model, decay), cross_entropy, nullptr, nullptr});
    for (int step = 0; step < 3; ++step) {
      reference_opt->zero_grad();
      cross_entropy(reference->forward(x), y).backward();
      reference_opt->step();
      b.optimizer->zero_grad();
      plugin->backward(b.criterion(b.model->forward(shard(x)), shard(y)), *b.optimizer);
      EXPECT_TRUE(b.optimizer->step());
    }
    expect_weights_near(*b.model, *reference, 1e-5);
  }
}

TEST(TorchDdp, ReshardsTheDataLoaderOverTheWorld) {
  auto dataset = std::make_shared<data::SyntheticDataset>(64, data::ImageShape{3, 16, 16}, 10, /*seed=*/3);
  auto loader = std::make_shared<data::DataLoader>(dataset, data::DataLoaderOptions(kPerRankBatch).prefetch(0));
  const auto batches_alone = loader->num_batches();
  auto plugin = make_plugin({});
  auto model = make_vit();
  auto b = plugin->boost({model, make_adamw(*model), cross_entropy, loader, nullptr});
  ASSERT_EQ(b.dataloader, loader);
  EXPECT_EQ(loader->options().num_replicas(), world()->size());
  EXPECT_EQ(loader->options().rank(), world()->rank());
  EXPECT_EQ(loader->num_batches(), batches_alone / world()->size());
}

TEST(TorchDdp, RejectsBadOptionsAllAtOnce) {
  try {
    make_plugin({{"bucket_cap_mb", "-1"}, {"precision", "fp8"}, {"max_grad_norm", "-2"}, {"bogus", "1"}});
    ADD_FAILURE() << "expected an error";
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    for (const char* needle : {"bucket_cap_mb", "fp8", "max_grad_norm", "bogus"}) {
      EXPECT_NE(message.find(needle), std::string::npos) << needle << " not in: " << message;
    }
  }
  EXPECT_THROW(make_plugin({{"initial_scale", "1024"}}), std::invalid_argument);  // fp16 only
  EXPECT_THROW(make_plugin({{"precision", "fp16"}, {"backoff_factor", "2"}}), std::invalid_argument);
}

}  // namespace
}  // namespace colo
