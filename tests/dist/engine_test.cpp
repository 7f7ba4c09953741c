// The training engines of libcolo_engine driven directly, without a plugin shared object: each
// model half and optimizer half composed by hand over the world (what a plugin's boost() does in
// a few lines), trained on each rank's shard of the global batches, against one process training
// on the whole batches. A plugin is then only the recipe; these hold the engines themselves.
#include <colo/dist/process_group.h>
#include <colo/engine/data_parallel.h>
#include <colo/engine/gemini_chunk_owner.h>
#include <colo/engine/gemini_model.h>
#include <colo/engine/gemini_optimizer.h>
#include <colo/engine/low_level_zero_model.h>
#include <colo/engine/mixed_precision_optimizer.h>
#include <colo/engine/parallelize.h>
#include <colo/engine/pipeline_model.h>
#include <colo/engine/torch_ddp_model.h>
#include <colo/engine/zero_optimizer.h>
#include <colo/zero/chunked_parameters.h>
#include <colo/zero/gather_full_tensors.h>
#include <colo/zero/shard_layout.h>
#include <colo/zero/sharded_adam.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dist_test_env.h"
#include "plugin_equivalence.h"

namespace colo::test {
namespace {

// A model half and an optimizer half, as a plugin hands them back.
struct EngineParts {
  std::shared_ptr<ModelWrapper> model;
  std::shared_ptr<OptimizerWrapper> optimizer;
};

// One process, the whole of each global batch, torch's AdamW as the engines are given it.
Trajectory engine_reference_run(nn::LayerStack& model, const GlobalBatches& data) {
  auto optimizer = conditioned_adamw(model);
  Trajectory t;
  for (std::size_t i = 0; i < data.images.size(); ++i) {
    optimizer->zero_grad();
    auto loss = cross_entropy(model.forward(data.images[i]), data.labels[i]);
    loss.backward();
    optimizer->step();
    t.losses.push_back(loss.item<double>());
  }
  return t;
}

// The engines' own calls, no Plugin: backward through the optimizer half (hooks, scaling), step.
Trajectory engine_run(EngineParts& parts, const GlobalBatches& data) {
  Trajectory t;
  for (std::size_t i = 0; i < data.images.size(); ++i) {
    parts.optimizer->zero_grad();
    auto loss = cross_entropy(parts.model->forward(shard(data.images[i])), shard(data.labels[i]));
    parts.optimizer->backward(loss);
    EXPECT_TRUE(parts.optimizer->step()) << "step " << i;
    t.losses.push_back(global_mean(loss.item<double>()));
  }
  return t;
}

// Each engine against the reference: losses step by step, then every weight.
void expect_engine_trains_like_one_process(EngineParts parts, const std::string& what) {
  SCOPED_TRACE(what);
  const auto data = make_batches(kSteps, kPerRankBatch * world()->size());
  auto reference = make_vit();
  const auto want = engine_reference_run(*reference, data);
  const auto got = engine_run(parts, data);
  expect_losses_near(got, want, kFp32Tolerance);
  expect_weights_near(*parts.model, *reference, kFp32Tolerance);
}

std::shared_ptr<nn::LayerStack> engine_model() {
  auto model = make_vit();
  broadcast_model(*model, device(), *world());
  return model;
}

TEST(Engines, ReplicasWithBucketedAllReduceTrainLikeOneProcess) {
  auto model = engine_model();
  auto optimizer = std::make_shared<MixedPrecisionOptimizer>(conditioned_adamw(*model), model,
                                                             MixedPrecisionOptimizerOptions());
  auto reducer = apply_ddp(*model, world(), ddp::BucketedAllReduceOptions().bucket_cap_mb(0.01));
  auto wrapped = std::make_shared<TorchDdpModel>(model, reducer, amp::PrecisionPolicy(), optimizer->master_weights(),
                                                 world());
  expect_engine_trains_like_one_process({wrapped, optimizer}, "MixedPrecisionOptimizer + TorchDdpModel");
}

TEST(Engines, ZeroStagesOneAndTwoTrainLikeOneProcess) {
  for (int stage : {1, 2}) {
    auto model = engine_model();
    auto optimizer = std::make_shared<ZeroOptimizer>(conditioned_adamw(*model), model, world(),
                                                     ZeroOptimizerOptions().stage(stage).bucket_cap_mb(0.01));
    auto wrapped = std::make_shared<LowLevelZeroModel>(model, optimizer);
    expect_engine_trains_like_one_process({wrapped, optimizer},
                                          "ZeroOptimizer + LowLevelZeroModel, stage " + std::to_string(stage));
  }
}

// The chunks belong to the model half; the optimizer half borrows them.
TEST(Engines, GeminiChunksTrainLikeOneProcess) {
  auto model = engine_model();
  auto adamw = conditioned_adamw(*model);
  auto chunks = std::make_shared<GeminiChunkOwner>(model, adamw, world(), GeminiChunkOptions().chunk_size_mb(0.05));
  auto wrapped = std::make_shared<GeminiModel>(chunks);
  auto optimizer = std::make_shared<GeminiOptimizer>(adamw, chunks, GeminiOptimizerOptions());
  expect_engine_trains_like_one_process({wrapped, optimizer}, "GeminiChunkOwner + GeminiModel + GeminiOptimizer");
}

// The model half needs only its chunk owner, no optimizer half: a forward and a backward over
// each rank's shard leave every chunk released and each chunk's gradient shard holding this rank's
// part of the mean gradient over the global batch (as one process computes it), and the model's
// state is the weights it started from. Every weight is randomised (a fresh ViT's biases are 0).
TEST(Engines, GeminiModelNeedsOnlyItsChunkOwner) {
  const auto randomised = [] {
    auto model = make_vit();
    torch::NoGradGuard no_grad;
    torch::manual_seed(3);
    for (auto& p : model->parameters()) p.add_(torch::randn_like(p) * 0.05);
    return model;
  };
  const auto data = make_batches(1, kPerRankBatch * world()->size());
  auto reference = randomised();
  cross_entropy(reference->forward(data.images[0]), data.labels[0]).backward();
  std::map<std::string, torch::Tensor> want;
  for (const auto& item : reference->canonical_named_parameters()) want.emplace(item.key(), item.value().grad());

  auto model = randomised();
  broadcast_model(*model, device(), *world());
  auto chunks = std::make_shared<GeminiChunkOwner>(model, conditioned_adamw(*model), world(),
                                                   GeminiChunkOptions().chunk_size_mb(0.03).max_prefetch(1));
  ASSERT_GT(chunks->num_chunks(), 2u);
  GeminiModel wrapped(chunks);
  cross_entropy(wrapped.forward(shard(data.images[0])), shard(data.labels[0])).backward();
  EXPECT_EQ(chunks->chunks().gathered_bytes(), 0) << "a synchronised backward releases every chunk";
  chunks->finalize_gradients();
  std::size_t compared = 0;
  for (std::size_t c = 0; c < chunks->num_chunks(); ++c) {
    const auto& state = chunks->chunk_state(c);
    const auto full = zero::gather_full_tensors(state.layout(), *world(), state.grad());
    ASSERT_EQ(full.size(), chunks->chunk_members(c).size());
    for (std::size_t k = 0; k < full.size(); ++k) {
      const auto& name = chunks->param_names()[chunks->chunk_members(c)[k]];
      const auto& expected = want.at(name);
      EXPECT_LE(relative_error(full[k].view(expected.sizes()), expected), kFp32Tolerance) << name;
      ++compared;
    }
  }
  EXPECT_EQ(compared, want.size());
  expect_weights_near(wrapped, *reference, 0.0);
}

// One pipeline stage (pp 1) over data-parallel replicas: the PipelineModel's forward, its
// gradient-sync switch and its masters overlay, as hybrid_parallel builds it at pp_size 1.
TEST(Engines, OneStagePipelineModelTrainsLikeOneProcess) {
  auto model = engine_model();
  PipelineModel::Parts parts;
  parts.stack = model;
  parts.chunks = {model};
  parts.data_parallel = apply_data_parallel(
      model, conditioned_adamw(*model), world(),
      DataParallelOptions().all_reduce(ddp::BucketedAllReduceOptions().bucket_cap_mb(0.01)));
  auto optimizer = parts.data_parallel->optimizer();
  expect_engine_trains_like_one_process({std::make_shared<PipelineModel>(std::move(parts)), optimizer},
                                        "MixedPrecisionOptimizer + PipelineModel (one stage)");
}

// Every weight moved off its initial value (a fresh ViT's biases and LayerNorms are constant).
std::shared_ptr<nn::LayerStack> engine_vit() {
  auto model = make_vit();
  torch::NoGradGuard no_grad;
  torch::manual_seed(5);
  for (auto& p : model->parameters()) p.add_(torch::randn_like(p) * 0.05);
  return model;
}

// apply_data_parallel gives each zero_stage its engine (the two halves of the right kinds), and
// training through them with each step's batch in two microbatches accumulated under the one
// gradient-sync handle (off for both backwards, then reduce_accumulated_gradients) matches one
// process on the whole batches.
TEST(Engines, ApplyDataParallelBuildsEachZeroStageWithOneSyncHandle) {
  const auto data = make_batches(kSteps, kPerRankBatch * world()->size());
  auto reference = engine_vit();
  const auto want = engine_reference_run(*reference, data);
  for (int stage : {0, 1, 2, 3}) {
    SCOPED_TRACE("zero_stage " + std::to_string(stage));
    auto model = engine_vit();
    broadcast_model(*model, device(), *world());
    const auto engine =
        apply_data_parallel(model, conditioned_adamw(*model), world(),
                            DataParallelOptions()
                                .zero_stage(stage)
                                .caller("my_recipe")
                                .all_reduce(ddp::BucketedAllReduceOptions().bucket_cap_mb(0.01))
                                .zero(ZeroOptimizerOptions().bucket_cap_mb(0.01))
                                .chunks(GeminiChunkOptions().chunk_size_mb(0.05)));
    EXPECT_EQ(engine->zero_stage(), stage);
    const bool replicas = stage == 0, zero = stage == 1 || stage == 2, chunks = stage == 3;
    EXPECT_EQ(dynamic_cast<TorchDdpModel*>(engine->model().get()) != nullptr, replicas);
    EXPECT_EQ(dynamic_cast<MixedPrecisionOptimizer*>(engine->optimizer().get()) != nullptr, replicas);
    EXPECT_EQ(dynamic_cast<LowLevelZeroModel*>(engine->model().get()) != nullptr, zero);
    EXPECT_EQ(dynamic_cast<ZeroOptimizer*>(engine->optimizer().get()) != nullptr, zero);
    EXPECT_EQ(dynamic_cast<GeminiModel*>(engine->model().get()) != nullptr, chunks);
    EXPECT_EQ(engine->gemini() != nullptr, chunks);
    EXPECT_EQ(dynamic_cast<GeminiOptimizer*>(engine->optimizer().get()) != nullptr, chunks);
    EXPECT_EQ(engine->reducer() != nullptr, replicas && world()->size() > 1);

    Trajectory got;
    for (std::size_t i = 0; i < data.images.size(); ++i) {
      engine->optimizer()->zero_grad();
      const auto inputs = shard(data.images[i]).tensor_split(2);
      const auto labels = shard(data.labels[i]).tensor_split(2);
      engine->set_gradient_sync(false);
      EXPECT_FALSE(engine->gradient_sync());
      double loss = 0;
      for (std::size_t h = 0; h < 2; ++h) {
        auto half = cross_entropy(engine->model()->forward(inputs[h]), labels[h]) * 0.5;
        engine->optimizer()->backward(half);
        loss += half.item<double>();
      }
      engine->reduce_accumulated_gradients();
      engine->set_gradient_sync(true);
      EXPECT_TRUE(engine->gradient_sync());
      EXPECT_TRUE(engine->optimizer()->step()) << "step " << i;
      got.losses.push_back(global_mean(loss));
    }
    expect_losses_near(got, want, kFp32Tolerance);
    expect_weights_near(*engine->model(), *reference, kFp32Tolerance);
  }
}

// An engine names whoever composed it, never a plugin of its own choosing.
TEST(Engines, ErrorsNameTheCallerNotAPlugin) {
  auto model = engine_model();
  auto sgd = std::make_shared<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.1));
  for (const std::string& caller : {std::string("my_zero_recipe"), std::string("ZeroOptimizer")}) {
    try {
      ZeroOptimizer z(sgd, model, world(), ZeroOptimizerOptions().caller(caller));
      ADD_FAILURE() << "SGD accepted";
    } catch (const std::invalid_argument& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.rfind(caller + " updates flat shards", 0), 0u) << message;
      for (const char* plugin : {"low_level_zero", "gemini plugin", "hybrid_parallel"}) {
        EXPECT_EQ(message.find(plugin), std::string::npos) << message;
      }
    }
  }
  try {
    GeminiChunkOwner g(model, conditioned_adamw(*model), world(),
                       GeminiChunkOptions().caller("my_gemini_recipe").max_prefetch(-1));
    ADD_FAILURE() << "max_prefetch=-1 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("my_gemini_recipe: ", 0), 0u) << e.what();
  }
  // apply_data_parallel checks before anything changes, naming its caller.
  for (int stage : {1, 3}) {
    try {
      apply_data_parallel(model, sgd, world(), DataParallelOptions().zero_stage(stage).caller("my_recipe"));
      ADD_FAILURE() << "SGD accepted at zero_stage " << stage;
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()).rfind("my_recipe", 0), 0u) << e.what();
    }
  }
  for (int stage : {-1, 4}) {
    try {
      apply_data_parallel(model, sgd, world(), DataParallelOptions().zero_stage(stage).caller("my_recipe"));
      ADD_FAILURE() << "zero_stage " << stage << " accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()),
                "my_recipe: zero_stage=" + std::to_string(stage) +
                    " does not exist; use 0 (replicas), 1, 2 (ZeRO) or 3 (gemini's chunks)");
    }
  }
  // gemini's step borrows the chunks made for one optimizer: another (here without the head's
  // parameters) is refused, naming the caller.
  auto chunked = engine_model();
  auto chunks = std::make_shared<GeminiChunkOwner>(chunked, conditioned_adamw(*chunked), world(), GeminiChunkOptions());
  std::vector<torch::Tensor> without_head;
  for (const auto& item : chunked->canonical_named_parameters()) {
    if (item.key().rfind("head.", 0) != 0) without_head.push_back(item.value());
  }
  ASSERT_LT(without_head.size(), chunked->parameters().size());
  auto other = std::make_shared<torch::optim::AdamW>(without_head, torch::optim::AdamWOptions(kLr));
  try {
    GeminiOptimizer g(other, chunks, GeminiOptimizerOptions().caller("my_gemini_recipe"));
    ADD_FAILURE() << "an optimizer over other parameters accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("my_gemini_recipe: the optimizer steps other parameters", 0), 0u)
        << e.what();
  }
}

}  // namespace
}  // namespace colo::test
