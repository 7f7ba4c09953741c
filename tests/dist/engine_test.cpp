// The training engines of libcolo_engine driven directly, without a plugin shared object: each
// model half and optimizer half composed by hand over the world (what a plugin's boost() does in
// a few lines), trained on each rank's shard of the global batches, against one process training
// on the whole batches. A plugin is then only the recipe; these hold the engines themselves.
#include <colo/dist/process_group.h>
#include <colo/engine/gemini_model.h>
#include <colo/engine/gemini_optimizer.h>
#include <colo/engine/low_level_zero_model.h>
#include <colo/engine/mixed_precision_optimizer.h>
#include <colo/engine/parallelize.h>
#include <colo/engine/pipeline_model.h>
#include <colo/engine/torch_ddp_model.h>
#include <colo/engine/zero_optimizer.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>

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
  broadcast_model(*model, torch::kCPU, *world());
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

TEST(Engines, GeminiChunksTrainLikeOneProcess) {
  auto model = engine_model();
  auto optimizer = std::make_shared<GeminiOptimizer>(conditioned_adamw(*model), model, world(),
                                                     GeminiOptimizerOptions().chunk_size_mb(0.05));
  auto wrapped = std::make_shared<GeminiModel>(model, optimizer);
  expect_engine_trains_like_one_process({wrapped, optimizer}, "GeminiOptimizer + GeminiModel");
}

// One pipeline stage (pp 1) over data-parallel replicas: the PipelineModel's forward, its
// gradient-sync switch and its masters overlay, as hybrid_parallel builds it at pp_size 1.
TEST(Engines, OneStagePipelineModelTrainsLikeOneProcess) {
  auto model = engine_model();
  auto optimizer = std::make_shared<MixedPrecisionOptimizer>(conditioned_adamw(*model), model,
                                                             MixedPrecisionOptimizerOptions());
  PipelineModel::Parts parts;
  parts.stack = model;
  parts.chunks = {model};
  parts.masters = optimizer->master_weights();
  parts.reducer = apply_ddp(*model, world(), ddp::BucketedAllReduceOptions().bucket_cap_mb(0.01));
  expect_engine_trains_like_one_process({std::make_shared<PipelineModel>(std::move(parts)), optimizer},
                                        "MixedPrecisionOptimizer + PipelineModel (one stage)");
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
    GeminiOptimizer g(conditioned_adamw(*model), model, world(),
                      GeminiOptimizerOptions().caller("my_gemini_recipe").max_prefetch(-1));
    ADD_FAILURE() << "max_prefetch=-1 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("my_gemini_recipe: ", 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace colo::test
