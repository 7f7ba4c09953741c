// pipeline::ScheduleRunner on real ranks: what each schedule holds (measured from the tensors the
// runner keeps, beside the dry run's prediction), forward-only runs against one process's
// forward, and failures that name the rank, the action and the peer.
#include <colo/dist/errors.h>
#include <colo/dist/process_group.h>
#include <colo/nn/vision_transformer.h>
#include <colo/pipeline/partition.h>
#include <colo/pipeline/schedule_generators.h>
#include <colo/pipeline/schedule_registry.h>
#include <colo/pipeline/schedule_runner.h>
#include <colo/pipeline/simulator.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "dist_test_env.h"
#include "plugin_equivalence.h"

namespace colo::pipeline {
namespace {

using namespace test;

std::shared_ptr<nn::LayerStack> deep_vit() { return make_vit(tiny_vit().depth(8), /*seed=*/8); }

// This rank's chunks of `model` for `stages` (uniform cut, head with the last block).
std::vector<std::shared_ptr<nn::LayerStack>> chunks_of(const nn::LayerStack& model, const StageManager& stages) {
  const auto ranges = partition_layers(static_cast<int>(model.size()), stages.num_stages(),
                                       PartitionOptions().glue_last(1));
  std::vector<std::shared_ptr<nn::LayerStack>> chunks;
  for (int stage : stages.stages()) chunks.push_back(model.slice(ranges[stage].begin, ranges[stage].end));
  return chunks;
}

StageCallbacks plain_callbacks(int64_t batch) {
  StageCallbacks c;
  c.loss = [batch](const torch::Tensor& out, const torch::Tensor& y) {
    return cross_entropy(out, y) * (static_cast<double>(out.size(0)) / static_cast<double>(batch));
  };
  c.backward_loss = [](const torch::Tensor& loss) { loss.backward(); };
  c.backward_output = [](const torch::Tensor& out, const torch::Tensor& grad) { torch::autograd::backward({out}, {grad}); };
  return c;
}

TEST(PipelineRunner, HoldsWhatTheDryRunPredictsForEverySchedule) {
  const int pp = std::min(world()->size(), 4);
  const auto group = consecutive_group(pp, "runner_peak");
  constexpr int kMicrobatches = 8;
  const auto data = make_batches(1, 16, 3);
  const auto inputs = data.images[0].chunk(kMicrobatches);
  const auto targets = data.labels[0].chunk(kMicrobatches);
  struct Case {
    std::string style;
    int chunks;
  };
  for (const Case& c : {Case{"gpipe", 1}, Case{"1f1b", 1}, Case{"zero_bubble", 1}, Case{"interleaved", 2}}) {
    SCOPED_TRACE(c.style);
    if (c.chunks > 1 && pp < 2) continue;  // interleaving needs two ranks
    auto model = deep_vit();
    const StageManager stages(pp, group->rank(), c.chunks);
    auto schedule = builtin_schedules().make(c.style, ScheduleShape(pp, kMicrobatches).chunks(c.chunks));
    const auto predicted = simulate(schedule).ranks[group->rank()].peak_in_flight;
    ScheduleRunner runner(schedule, stages, group, chunks_of(*model, stages));
    const auto result = runner.run(std::vector<torch::Tensor>(inputs.begin(), inputs.end()),
                                   std::vector<torch::Tensor>(targets.begin(), targets.end()), plain_callbacks(16));
    EXPECT_EQ(result.peak_held_microbatches, predicted) << "pp rank " << group->rank();
    if (c.style == "1f1b" && group->rank() == 0) {
      EXPECT_EQ(result.peak_held_microbatches, pp) << "1F1B keeps at most pp microbatches on the first stage";
    }
    if (c.style == "gpipe" && group->rank() == 0 && pp > 1) {
      EXPECT_EQ(result.peak_held_microbatches, kMicrobatches);
    }
    if (world()->rank() == 0) {
      std::cout << fmt::format("[measured] {} pp={} m={}: first stage held at most {} microbatches (dry run: {})\n",
                               c.style, pp, kMicrobatches, result.peak_held_microbatches, predicted);
    }
  }
  world()->barrier().wait();
}

TEST(PipelineRunner, ForwardOnlyGivesOneProcesssOutputsForUnevenMicrobatches) {
  const int pp = std::min(world()->size(), 4);
  const auto group = consecutive_group(pp, "runner_forward");
  auto model = deep_vit();
  model->eval();
  const auto data = make_batches(1, 11, 4);  // 11 samples: microbatches of 3, 3, 3, 2
  torch::Tensor want;
  {
    torch::NoGradGuard no_grad;
    want = model->forward(data.images[0]);
  }
  const StageManager stages(pp, group->rank(), 1);
  ScheduleRunner runner(builtin_schedules().make("1f1b", ScheduleShape(pp, 4)), stages, group,
                        chunks_of(*model, stages));
  const auto inputs = data.images[0].split(3);
  const auto targets = data.labels[0].split(3);
  const auto result =
      runner.run(std::vector<torch::Tensor>(inputs.begin(), inputs.end()),
                 std::vector<torch::Tensor>(targets.begin(), targets.end()), plain_callbacks(11),
                 RunOptions().forward_only(true).keep_outputs(true));
  if (stages.is_last_stage()) {
    ASSERT_EQ(result.outputs.size(), 4u);
    EXPECT_TRUE(torch::allclose(torch::cat(result.outputs), want, 1e-6, 1e-6));
    EXPECT_NEAR(result.loss.item<double>(), cross_entropy(want, data.labels[0]).item<double>(), 1e-6);
  } else {
    EXPECT_FALSE(result.loss.defined());
  }
  EXPECT_EQ(result.peak_held_microbatches, 0) << "a forward-only run holds nothing for backward";
  world()->barrier().wait();
}

// A layer that fails on its n-th forward: a rank that dies in the middle of a schedule.
class FailingLayer : public nn::Layer {
 public:
  explicit FailingLayer(int fail_at) : fail_at_(fail_at) {}
  torch::Tensor forward(const torch::Tensor& x) override {
    if (++calls_ == fail_at_) throw std::runtime_error("injected failure");
    return x * 1.0;
  }

 private:
  int fail_at_;
  int calls_ = 0;
};

TEST(PipelineRunner, APeerThatDiesMidScheduleIsNamedWithTheActionAndTheSchedule) {
  if (world()->backend() == dist::Backend::kNccl) {
    GTEST_SKIP() << "an abandoned NCCL receive ends the process (watchdog), not the operation";
  }
  if (world()->size() < 2) GTEST_SKIP() << "needs a peer";
  const auto group = consecutive_group(2, "runner_dead_peer");
  auto model = deep_vit();
  const StageManager stages(2, group->rank(), 1);
  auto chunks = chunks_of(*model, stages);
  // The second stage fails in its forward of microbatch 2 (the shape probe is its first call),
  // and its group goes: what a peer's death looks like to the first stage.
  if (group->rank() == 1) chunks[0]->push_back(std::make_shared<FailingLayer>(4));
  const auto data = make_batches(1, 8, 5);
  const auto inputs = data.images[0].chunk(4);
  const auto targets = data.labels[0].chunk(4);
  ScheduleRunner runner(builtin_schedules().make("1f1b", ScheduleShape(2, 4)), stages, group, chunks);
  std::string message;
  bool dist_error = false;
  try {
    runner.run(std::vector<torch::Tensor>(inputs.begin(), inputs.end()),
               std::vector<torch::Tensor>(targets.begin(), targets.end()), plain_callbacks(8));
  } catch (const dist::DistError& e) {
    message = e.what();
    dist_error = true;
  } catch (const std::exception& e) {
    message = e.what();
  }
  if (world()->rank() < 2) std::cout << "[error seen on rank " << world()->rank() << "] " << message << "\n";
  if (group->rank() == 1) {
    EXPECT_NE(message.find("pp rank 1 (global rank " + std::to_string(group->global_rank(1)) + ") failed at action 1F2"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("injected failure"), std::string::npos) << message;
    EXPECT_NE(message.find(">>1F2<<"), std::string::npos) << "the schedule with the action marked: " << message;
    group->close();  // this rank is gone for its peer
  } else {
    EXPECT_TRUE(dist_error) << message;
    EXPECT_NE(message.find("pp rank 0"), std::string::npos) << message;
    EXPECT_NE(message.find("peer: pp rank 1, global rank " + std::to_string(group->global_rank(1))), std::string::npos)
        << message;
    EXPECT_NE(message.find(">>"), std::string::npos) << "the schedule with the failing action marked: " << message;
  }
  world()->barrier().wait();
}

}  // namespace
}  // namespace colo::pipeline
