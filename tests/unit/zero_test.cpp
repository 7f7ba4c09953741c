// core/zero on one process: the shard layout's arithmetic (chunks, padding, pieces, round trips),
// the flat-shard Adam against torch's, the stage-2 reducer's bookkeeping in a world of one, and
// the low_level_zero plugin's option errors. The multi-rank arithmetic is in
// tests/dist/low_level_zero_test.cpp.
#include <colo/booster/plugin_registry.h>
#include <colo/files/files.h>
#include <colo/dist/environment.h>
#include <colo/dist/process_group.h>
#include <colo/optim/hybrid_adam.h>
#include <colo/zero/allocate.h>
#include <colo/zero/pinned_staging.h>
#include <colo/zero/reduce_scatter_grad_reducer.h>
#include <colo/zero/shard_layout.h>
#include <colo/zero/sharded_adam.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "tiny_layer_stack.h"

namespace colo::zero {
namespace {

using Buckets = std::vector<std::vector<std::size_t>>;

TEST(ZeroShardLayout, PadsEachBucketToAMultipleOfTheWorld) {
  // Parameters of 5, 3 and 7 elements; bucket 0 = {2, 1} (10 elements), bucket 1 = {0} (5).
  const ShardLayout layout({5, 3, 7}, Buckets{{2, 1}, {0}}, 4);
  EXPECT_EQ(layout.total_numel(), 15);
  EXPECT_EQ(layout.bucket_numel(0), 10);
  EXPECT_EQ(layout.chunk_numel(0), 3);  // ceil(10 / 4)
  EXPECT_EQ(layout.padded_bucket_numel(0), 12);
  EXPECT_EQ(layout.chunk_numel(1), 2);  // ceil(5 / 4)
  EXPECT_EQ(layout.padded_bucket_numel(1), 8);
  EXPECT_EQ(layout.chunk_offset(0), 0);
  EXPECT_EQ(layout.chunk_offset(1), 3);
  EXPECT_EQ(layout.shard_numel(), 5);
  // Bucket 0: p2 at [0, 7), p1 at [7, 10); bucket 1: p0 at [0, 5).
  EXPECT_EQ(layout.offset_in_bucket(2), 0);
  EXPECT_EQ(layout.offset_in_bucket(1), 7);
  EXPECT_EQ(layout.offset_in_bucket(0), 0);
  EXPECT_EQ(layout.bucket_of(0), 1u);
  // Rank 3 owns [9, 12) of bucket 0 (one element of p1, two of padding) and [6, 8) of bucket 1
  // (padding only).
  EXPECT_EQ(layout.valid_chunk_numel(0, 3), 1);
  EXPECT_EQ(layout.valid_chunk_numel(1, 3), 0);
  EXPECT_EQ(layout.padding_numel(3), 4);
  EXPECT_EQ(layout.padding_numel(0), 0);
  const auto pieces = layout.pieces(3);
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].param, 1u);
  EXPECT_EQ(pieces[0].param_offset, 2);
  EXPECT_EQ(pieces[0].shard_offset, 0);
  EXPECT_EQ(pieces[0].numel, 1);
  // Rank 2: [6, 9) of bucket 0 = p2's element 6, then p1's elements 0 and 1; [4, 6) of bucket 1 = p0's element 4 +
  // padding.
  const auto two = layout.pieces(2);
  ASSERT_EQ(two.size(), 3u);
  EXPECT_EQ(two[0].param, 2u);
  EXPECT_EQ(two[0].param_offset, 6);
  EXPECT_EQ(two[0].numel, 1);
  EXPECT_EQ(two[1].param, 1u);
  EXPECT_EQ(two[1].shard_offset, 1);
  EXPECT_EQ(two[1].numel, 2);
  EXPECT_EQ(two[2].param, 0u);
  EXPECT_EQ(two[2].param_offset, 4);
  EXPECT_EQ(two[2].shard_offset, 3);
  EXPECT_EQ(two[2].numel, 1);
}

TEST(ZeroShardLayout, RanksTogetherHoldEveryElementExactlyOnce) {
  const std::vector<int64_t> numels{5, 3, 7, 0, 1, 64};
  const Buckets buckets{{5}, {4, 3, 2}, {1, 0}};
  for (int world = 1; world <= 7; ++world) {
    const ShardLayout layout(numels, buckets, world);
    std::vector<std::vector<int>> seen;
    for (auto n : numels) seen.emplace_back(n, 0);
    int64_t padding = 0;
    for (int r = 0; r < world; ++r) {
      int64_t previous_end = 0;
      for (const auto& piece : layout.pieces(r)) {
        EXPECT_GE(piece.shard_offset, previous_end) << "pieces in shard order, not overlapping";
        previous_end = piece.shard_offset + piece.numel;
        for (int64_t k = 0; k < piece.numel; ++k) ++seen[piece.param][piece.param_offset + k];
      }
      EXPECT_LE(previous_end, layout.shard_numel());
      padding += layout.padding_numel(r);
    }
    for (std::size_t p = 0; p < numels.size(); ++p) {
      for (int count : seen[p]) EXPECT_EQ(count, 1) << "world " << world << " parameter " << p;
    }
    EXPECT_EQ(layout.shard_numel() * world, layout.total_numel() + padding);
    EXPECT_LT(padding, static_cast<int64_t>(buckets.size()) * world);  // < world per bucket
  }
}

TEST(ZeroShardLayout, ShardsRoundTripThroughUnshard) {
  torch::manual_seed(3);
  const std::vector<torch::Tensor> full{torch::randn({2, 3}), torch::randn({5}), torch::randn({1, 1, 4})};
  const ShardLayout layout({6, 5, 4}, Buckets{{2, 1}, {0}}, 3);
  std::vector<torch::Tensor> shards;
  for (int r = 0; r < 3; ++r) {
    auto shard = torch::full({layout.shard_numel()}, 42.0);
    layout.copy_to_shard(r, full, shard);
    // Padding is zeroed.
    const auto pieces = layout.pieces(r);
    int64_t covered = 0;
    for (const auto& p : pieces) covered += p.numel;
    EXPECT_EQ(covered + layout.padding_numel(r), layout.shard_numel());
    EXPECT_EQ(shard.abs().gt(41).sum().item<int64_t>(), 0);
    shards.push_back(shard);
  }
  const auto back = layout.unshard(torch::cat(shards));
  ASSERT_EQ(back.size(), full.size());
  for (std::size_t p = 0; p < full.size(); ++p) EXPECT_TRUE(torch::equal(back[p], full[p].reshape(-1))) << p;
  // A shard in another dtype takes the values rounded.
  auto half = torch::zeros({layout.shard_numel()}, torch::kBFloat16);
  layout.copy_to_shard(1, full, half);
  EXPECT_EQ(half.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(half, shards[1].to(torch::kBFloat16))) << "rank 1's shard, each value rounded to bf16";
}

TEST(ZeroShardLayout, RejectsBadLayouts) {
  EXPECT_THROW(ShardLayout({1}, Buckets{{0}}, 0), std::invalid_argument);
  EXPECT_THROW(ShardLayout({1, 2}, Buckets{{0}}, 2), std::invalid_argument);          // parameter 1 in no bucket
  EXPECT_THROW(ShardLayout({1, 2}, Buckets{{0, 1}, {1}}, 2), std::invalid_argument);  // in two
  EXPECT_THROW(ShardLayout({1}, Buckets{{3}}, 2), std::invalid_argument);             // out of range
  const ShardLayout layout({4}, Buckets{{0}}, 2);
  EXPECT_THROW(layout.pieces(2), std::out_of_range);
  auto wrong = torch::zeros({3});
  EXPECT_THROW(layout.copy_to_shard(0, {torch::zeros({4})}, wrong), std::invalid_argument);
  auto shard = torch::zeros({2});
  EXPECT_THROW(layout.copy_to_shard(0, {torch::zeros({5})}, shard), std::invalid_argument);
  EXPECT_THROW(layout.unshard(torch::zeros({3})), std::invalid_argument);
}

// ShardedAdam on every rank's shard (no communication needed) == torch's optimizer on the full
// parameters, two parameter groups interleaved (so each shard has several runs).
template <typename TorchOptimizer, typename TorchOptions>
void check_sharded_adam(bool adamw_mode) {
  torch::manual_seed(5);
  std::vector<torch::Tensor> params{torch::randn({4, 3}), torch::randn({3}), torch::randn({7}), torch::randn({2, 2})};
  const std::vector<std::size_t> group_of{0, 1, 0, 1};
  const auto options = [&](std::size_t g) {
    return optim::HybridAdamOptions(g == 0 ? 1e-2 : 3e-2).weight_decay(g == 0 ? 0.1 : 0.0).adamw_mode(adamw_mode);
  };
  std::vector<std::vector<torch::Tensor>> grads(3);
  for (auto& step : grads) {
    for (const auto& p : params) step.push_back(torch::randn(p.sizes()));
  }

  // torch on the full parameters.
  std::vector<torch::Tensor> reference;
  for (const auto& p : params) reference.push_back(p.clone().requires_grad_(true));
  std::vector<torch::optim::OptimizerParamGroup> groups;
  for (std::size_t g = 0; g < 2; ++g) {
    std::vector<torch::Tensor> members;
    for (std::size_t p = 0; p < params.size(); ++p) {
      if (group_of[p] == g) members.push_back(reference[p]);
    }
    groups.emplace_back(
        members, std::make_unique<TorchOptions>(TorchOptions(options(g).lr()).weight_decay(options(g).weight_decay())));
  }
  TorchOptimizer torch_optimizer(std::move(groups), TorchOptions(1e-3));
  for (const auto& step : grads) {
    for (std::size_t p = 0; p < params.size(); ++p) reference[p].mutable_grad() = step[p].clone();
    torch_optimizer.step();
  }

  std::vector<int64_t> numels;
  for (const auto& p : params) numels.push_back(p.numel());
  auto layout = std::make_shared<ShardLayout>(numels, Buckets{{3, 2}, {1, 0}}, 3);
  std::vector<torch::Tensor> shards;
  for (int rank = 0; rank < 3; ++rank) {
    ShardedAdam adam(layout, rank, group_of, torch::TensorOptions());
    auto master = adam.master();
    layout->copy_to_shard(rank, params, master);
    for (const auto& step : grads) {
      auto grad = adam.grad();
      layout->copy_to_shard(rank, step, grad);
      adam.step({options(0), options(1)});
    }
    EXPECT_EQ(adam.step_count(), 3);
    shards.push_back(adam.master());
  }
  const auto updated = layout->unshard(torch::cat(shards));
  for (std::size_t p = 0; p < params.size(); ++p) {
    const double error = (updated[p] - reference[p].detach().reshape(-1)).abs().max().item<double>();
    EXPECT_LE(error, 1e-6) << "parameter " << p;
  }
}

TEST(ZeroShardedAdam, MatchesTorchAdamWPerGroup) {
  check_sharded_adam<torch::optim::AdamW, torch::optim::AdamWOptions>(true);
}
TEST(ZeroShardedAdam, MatchesTorchAdamPerGroup) {
  check_sharded_adam<torch::optim::Adam, torch::optim::AdamOptions>(false);
}

// Memory that cannot be had: the error names what was being allocated, how much, where, and the
// option that helps (PyTorch's own names none of them).
TEST(ZeroAllocate, ARefusedAllocationSaysWhatHowMuchAndWhatHelps) {
  const int64_t huge = int64_t{1} << 45;  // 128 TiB of fp32
  try {
    allocate(huge, torch::TensorOptions().dtype(torch::kFloat), "the widgets of chunk 3", "Use fewer widgets");
    ADD_FAILURE() << "expected an AllocationError";
  } catch (const AllocationError& e) {
    const std::string message = e.what();
    for (const char* needle : {"could not allocate 128.00 TiB", "host memory", "the widgets of chunk 3", "Use fewer widgets"}) {
      EXPECT_NE(message.find(needle), std::string::npos) << needle << " not in: " << message;
    }
  }
  // A ZeRO shard too large for the host: the first of its four tensors says which it is.
  auto layout = std::make_shared<ShardLayout>(std::vector<int64_t>{huge}, Buckets{{0}}, 1);
  try {
    ShardedAdam adam(layout, 0, {0}, torch::TensorOptions());
    ADD_FAILURE() << "expected an AllocationError";
  } catch (const AllocationError& e) {
    EXPECT_NE(std::string(e.what()).find("fp32 master weights of this rank's ZeRO shard"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("data-parallel ranks"), std::string::npos) << e.what();
  }
}

// On a CPU device nothing is staged: downloads hand the tensor itself over at once, uploads land
// in the destination (the GPU path is tests/gpu/pinned_staging_test.cpp).
TEST(ZeroPinnedStaging, OnACpuDevicePassesValuesStraightThrough) {
  PinnedStaging staging(torch::kCPU, PinnedStagingOptions().slot_bytes(64).slots(1));
  const auto values = torch::arange(8, torch::kFloat);
  torch::Tensor seen;
  staging.download(values, [&seen](const torch::Tensor& host) { seen = host; });
  EXPECT_TRUE(seen.is_same(values));
  auto destination = torch::zeros({8}, torch::kBFloat16);
  staging.upload(destination, [&values](const torch::Tensor& host) { host.copy_(values); });
  staging.finish();
  EXPECT_TRUE(torch::equal(destination.to(torch::kFloat), values));
  EXPECT_EQ(staging.staging_bytes(), 0);
}

TEST(ZeroShardedAdam, RejectsTooFewGroups) {
  auto layout = std::make_shared<ShardLayout>(std::vector<int64_t>{4}, Buckets{{0}}, 1);
  ShardedAdam adam(layout, 0, {0}, torch::TensorOptions());
  // Fewer groups than the layout uses is an error; more are allowed (gemini steps each chunk's
  // state with the optimizer's whole list of groups).
  EXPECT_THROW(adam.step({}), std::invalid_argument);
  EXPECT_NO_THROW(adam.step({optim::HybridAdamOptions(), optim::HybridAdamOptions()}));
  EXPECT_THROW(adam.set_step_count(-1), std::invalid_argument);
}

std::shared_ptr<dist::ProcessGroup> world_of_one() {
  const auto path = files::join(files::temp_directory(), "colo_zero_unit_store_" + std::to_string(::getpid()) + "_" +
                                                             std::to_string(std::rand()));
  dist::Environment env;
  env.rdzv_file = path;
  dist::ProcessGroup::Options options;
  options.timeout = std::chrono::seconds(10);
  return dist::init_world(env, options);
}

// The stage-2 reducer's bookkeeping where the average over ranks is the gradients themselves.
TEST(ZeroReduceScatterGradReducer, MovesGradientsIntoTheShardAndAccumulates) {
  auto world = world_of_one();
  torch::manual_seed(9);
  auto fc1 = torch::nn::Linear(4, 3);
  auto fc2 = torch::nn::Linear(3, 2);
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (const auto& item : fc1->named_parameters()) named.emplace_back("fc1." + item.key(), item.value());
  for (const auto& item : fc2->named_parameters()) named.emplace_back("fc2." + item.key(), item.value());
  std::vector<torch::Tensor> params;
  std::vector<int64_t> numels;
  for (const auto& [name, p] : named) {
    params.push_back(p);
    numels.push_back(p.numel());
  }
  auto layout = std::make_shared<ShardLayout>(numels, Buckets{{3, 2}, {1, 0}}, 1);
  auto grad_shard = torch::zeros({layout->shard_numel()});
  ReduceScatterGradReducer reducer(named, world, layout, grad_shard);
  const auto x = torch::randn({5, 4});
  const auto loss = [&] { return fc2(torch::tanh(fc1(x))).pow(2).sum(); };

  // The reference gradients, computed without hooks firing into a synchronising pass.
  reducer.set_sync(false);
  loss().backward();
  std::vector<torch::Tensor> expected;
  for (const auto& p : params) expected.push_back(p.grad().clone());
  EXPECT_EQ(reducer.synchronized_passes(), 0);
  reducer.zero_grad();
  for (const auto& p : params) EXPECT_FALSE(p.grad().defined());

  reducer.set_sync(true);
  loss().backward();
  EXPECT_EQ(reducer.synchronized_passes(), 1);
  for (const auto& p : params) EXPECT_FALSE(p.grad().defined()) << "stage 2 keeps only the shard";
  auto want = torch::zeros({layout->shard_numel()});
  layout->copy_to_shard(0, expected, want);
  EXPECT_TRUE(torch::allclose(grad_shard, want));

  // no_sync accumulates in param.grad; the next synchronised pass adds the sum.
  reducer.set_sync(false);
  loss().backward();
  for (const auto& p : params) EXPECT_TRUE(p.grad().defined());
  reducer.set_sync(true);
  loss().backward();
  EXPECT_EQ(reducer.synchronized_passes(), 2);
  EXPECT_TRUE(torch::allclose(grad_shard, 3 * want));
}

TEST(ZeroReduceScatterGradReducer, NamesParametersWithoutAGradient) {
  auto world = world_of_one();
  auto used = torch::randn({3}, torch::requires_grad());
  auto unused = torch::randn({2}, torch::requires_grad());
  auto layout = std::make_shared<ShardLayout>(std::vector<int64_t>{3, 2}, Buckets{{1, 0}}, 1);
  ReduceScatterGradReducer reducer({{"used", used}, {"unused", unused}}, world, layout,
                                   torch::zeros({layout->shard_numel()}));
  try {
    (used * 2).sum().backward();
    ADD_FAILURE() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("unused"), std::string::npos) << e.what();
  }
}

// In a world of one every collective is skipped (one rank's average is its own gradients), so
// both stages must train exactly as the optimizer alone does.
TEST(LowLevelZero, WorldOfOneTrainsLikeThePlainOptimizer) {
  auto world = world_of_one();
  for (const char* stage : {"1", "2"}) {
    SCOPED_TRACE(std::string("stage ") + stage);
    auto plugin =
        PluginRegistry::global().create("low_level_zero", {{"stage", stage}, {"precision", "fp32"}}, {world, c10::kCPU});
    auto model = test::tiny_layer_stack(5);
    auto optimizer = std::make_shared<optim::HybridAdam>(model->parameters(), optim::HybridAdamOptions(1e-2));
    Boosted b = plugin->boost({model, optimizer, test::cross_entropy_criterion(), nullptr, nullptr});

    auto reference = test::tiny_layer_stack(5);
    optim::HybridAdam reference_optimizer(reference->parameters(), optim::HybridAdamOptions(1e-2));
    const auto [x, y] = test::tiny_batch();
    for (int step = 0; step < 3; ++step) {
      const auto loss = test::boosted_step(*plugin, b, x, y);
      auto reference_loss = torch::nn::functional::cross_entropy(reference->forward(x), y);
      reference_loss.backward();
      reference_optimizer.step();
      reference_optimizer.zero_grad();
      EXPECT_NEAR(loss.item<double>(), reference_loss.item<double>(), 1e-6) << "step " << step;
    }
    const auto got = model->parameters();
    const auto want = reference->parameters();
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(torch::allclose(got[i], want[i], 1e-6, 1e-7)) << i;
  }
}

// The plugin's option errors, without a process group: options are parsed first.
std::string create_error(const PluginOptions& options) {
  try {
    PluginRegistry::global().create("low_level_zero", options, PluginContext{});
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(ZeroOptions, StageThreePointsAtGemini) {
  const auto message = create_error({{"stage", "3"}});
  EXPECT_NE(message.find("gemini"), std::string::npos) << message;
}

TEST(ZeroOptions, ReportsEveryProblemAtOnce) {
  const auto message = create_error({{"stage", "5"},
                                     {"precision", "fp64"},
                                     {"communication_dtype", "int8"},
                                     {"reduce_bucket_size_mb", "-1"},
                                     {"max_grad_norm", "-1"},
                                     {"cpu_offload", "maybe"},
                                     {"initial_scale", "1024"},
                                     {"bucket_size", "3"}});
  for (const char* needle : {"stage must be 1 or 2, got 5", "fp64", "int8", "reduce_bucket_size_mb", "max_grad_norm",
                             "maybe", "initial_scale only applies with precision=fp16", "unknown option 'bucket_size'",
                             "valid options", "overlap_communication"}) {
    EXPECT_NE(message.find(needle), std::string::npos) << needle << " not in: " << message;
  }
}

TEST(ZeroOptions, ValidOptionsGetAsFarAsTheMissingWorld) {
  const auto message = create_error({{"stage", "2"},
                                     {"precision", "fp16"},
                                     {"communication_dtype", "fp32"},
                                     {"reduce_bucket_size_mb", "12"},
                                     {"overlap_communication", "false"},
                                     {"cpu_offload", "true"},
                                     {"max_grad_norm", "1"},
                                     {"initial_scale", "1024"}});
  EXPECT_NE(message.find("world process group"), std::string::npos) << message;
}

}  // namespace
}  // namespace colo::zero
