// colo::Trainer against the loop a user writes by hand (the same losses, bit for bit, in fp32,
// under torch_ddp with and without accumulation and under a two-stage pipeline), and each
// provided hook's effect, on 2, 4 and 8 ranks.
#include <colo/booster/booster.h>
#include <colo/trainer/state_directory.h>
#include <colo/trainer/trainer.h>
#include <colo/trainer/trainer_hooks.h>
#include <colo/data/data_loader.h>
#include <colo/data/synthetic_dataset.h>
#include <colo/dist/process_group.h>
#include <colo/dist/process_group_mesh.h>
#include <colo/files/files.h>
#include <colo/optim/cosine_annealing_warmup_lr.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "dist_test_env.h"
#include "plugin_equivalence.h"

namespace colo::test {
namespace {

// 48 training and 20 test images of tiny_vit()'s shape.
std::shared_ptr<const data::Dataset> trainer_train_set() {
  return std::make_shared<data::SyntheticDataset>(48, data::ImageShape{3, 16, 16}, 10, 5);
}
std::shared_ptr<const data::Dataset> trainer_test_set() {
  return std::make_shared<data::SyntheticDataset>(20, data::ImageShape{3, 16, 16}, 10, 6);
}

// This rank's data-parallel shard of `dataset`, `batch` images per loader batch.
std::shared_ptr<data::DataLoader> trainer_loader(std::shared_ptr<const data::Dataset> dataset, const Boosted& b,
                                                 int64_t batch, bool shuffle) {
  const int64_t dp = b.mesh ? b.mesh->size(dist::MeshAxis::kDp) : 1;
  const int64_t dp_rank = b.mesh ? b.mesh->coordinate(dist::MeshAxis::kDp) : 0;
  return std::make_shared<data::DataLoader>(std::move(dataset), data::DataLoaderOptions(batch)
                                                                    .shuffle(shuffle)
                                                                    .drop_last(shuffle)
                                                                    .seed(9)
                                                                    .num_replicas(dp)
                                                                    .rank(dp_rank)
                                                                    .device(device()));
}

// A boosted tiny ViT under `plugin`, with a warm-up + cosine schedule over `total_steps`.
struct TrainerRun {
  std::shared_ptr<Plugin> plugin;
  std::unique_ptr<Booster> booster;
  Boosted boosted;
};

TrainerRun boost_tiny(const std::string& plugin, const PluginOptions& options,
                      const std::shared_ptr<dist::ProcessGroup>& group, int64_t batch, int64_t total_steps,
                      Criterion criterion = cross_entropy) {
  TrainerRun run;
  run.plugin = make_plugin(plugin, options, group);
  run.booster = std::make_unique<Booster>(run.plugin);
  auto model = make_vit(7);
  auto optimizer = conditioned_adamw(*model);
  run.boosted = run.booster->boost(model, optimizer, std::move(criterion));
  run.boosted.dataloader = trainer_loader(trainer_train_set(), run.boosted, batch, true);
  run.boosted.lr_scheduler =
      std::make_shared<optim::CosineAnnealingWarmupLR>(run.boosted.optimizer->optimizer(), total_steps, 2);
  return run;
}

// A user hook: each step's loss, averaged over the ranks that have one (every rank calls it).
class StepLosses : public TrainerHook {
 public:
  void after_step(Trainer& trainer, const StepResult& step) override {
    double sum = 0;
    for (const auto& loss : step.losses) sum += loss.item<double>();
    const double mean = step.losses.empty() ? 0.0 : sum / static_cast<double>(step.losses.size());
    auto t = torch::tensor({mean, step.losses.empty() ? 0.0 : 1.0}, torch::kFloat64).to(trainer.device());
    if (trainer.world() && trainer.world()->size() > 1) trainer.world()->all_reduce(t).wait();
    t = t.cpu();
    losses.push_back(t[0].item<double>() / t[1].item<double>());
  }
  std::vector<double> losses;
};

// The same loop by hand, as a user writes it with the Booster alone.
std::vector<double> hand_written_loop(TrainerRun& run, int64_t epochs, int64_t grad_accum,
                                      const std::shared_ptr<dist::ProcessGroup>& group) {
  auto& b = run.boosted;
  auto& loader = *b.dataloader;
  const bool pipelined = run.plugin->supports_pipeline();
  std::vector<double> losses;
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    loader.set_epoch(epoch);
    const int64_t steps = loader.num_batches() / grad_accum;
    for (int64_t s = 0; s < steps; ++s) {
      double sum = 0, count = 0;
      if (pipelined) {
        auto batch = loader.next();
        auto result = run.booster->execute_pipeline(batch->images, batch->labels, *b.model, b.criterion, *b.optimizer);
        if (result.loss.defined()) sum += result.loss.item<double>(), count += 1;
      } else {
        for (int64_t micro = 0; micro < grad_accum; ++micro) {
          auto batch = loader.next();
          auto loss = b.criterion(b.model->forward(batch->images), batch->labels);
          if (micro + 1 < grad_accum) {
            auto guard = run.booster->no_sync(*b.model, *b.optimizer);
            run.booster->backward(loss / static_cast<double>(grad_accum), *b.optimizer);
          } else {
            run.booster->backward(grad_accum > 1 ? loss / static_cast<double>(grad_accum) : loss, *b.optimizer);
          }
          sum += loss.item<double>(), count += 1;
        }
      }
      b.optimizer->step();
      b.optimizer->zero_grad();
      b.lr_scheduler->step();
      auto t = torch::tensor({count > 0 ? sum / count : 0.0, count > 0 ? 1.0 : 0.0}, torch::kFloat64).to(device());
      if (group->size() > 1) group->all_reduce(t).wait();
      t = t.cpu();
      losses.push_back(t[0].item<double>() / t[1].item<double>());
    }
  }
  return losses;
}

void expect_trainer_matches_hand_loop(const std::string& plugin, const PluginOptions& options,
                                      const std::shared_ptr<dist::ProcessGroup>& group, int64_t batch,
                                      int64_t grad_accum) {
  const int64_t epochs = 2;
  auto by_hand = boost_tiny(plugin, options, group, batch, 100);
  const auto want = hand_written_loop(by_hand, epochs, grad_accum, group);

  auto run = boost_tiny(plugin, options, group, batch, 100);
  auto losses = std::make_shared<StepLosses>();
  Trainer trainer(*run.booster, run.boosted, TrainerOptions().grad_accum(grad_accum).progress(false));
  const auto fit = trainer.fit(*run.boosted.dataloader, epochs, nullptr, 1,
                               {std::make_shared<LRSchedulerHook>(), losses});
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(fit.steps, static_cast<int64_t>(want.size()));
  ASSERT_EQ(losses->losses.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(losses->losses[i], want[i]) << "step " << i + 1;
}

TEST(Trainer, MatchesTheHandWrittenLoopUnderTorchDdp) {
  expect_trainer_matches_hand_loop("torch_ddp", {}, world(), 4, 1);
}

TEST(Trainer, MatchesTheHandWrittenLoopWithGradientAccumulation) {
  expect_trainer_matches_hand_loop("torch_ddp", {}, world(), 2, 2);
}

// After every micro-batch's backward: whether the ranks hold the same gradient (the data-parallel
// average) or each its own shard's (under no_sync), for the model's last parameter.
class GradientsAgree : public TrainerHook {
 public:
  void training_batch(Trainer& trainer, const at::Tensor&, const at::Tensor&) override {
    const auto g = trainer.boosted().model->module().parameters().back().grad().detach().to(torch::kFloat64);
    auto mean = g.clone();
    trainer.world()->all_reduce(mean, dist::ReduceOp::kAvg).wait();
    auto spread = torch::stack({(g - mean).abs().max(), mean.abs().max()});
    trainer.world()->all_reduce(spread, dist::ReduceOp::kMax).wait();
    spread = spread.cpu();
    agreed.push_back(spread[0].item<double>() <= 1e-6 * spread[1].item<double>());
  }
  std::vector<bool> agreed;
};

TEST(Trainer, SyncEveryMicrobatchAveragesEachMicrobatchNotOnlyTheLast) {
  if (world()->size() < 2) GTEST_SKIP() << "needs two ranks";
  auto agreement = [](bool sync_every_microbatch) {
    auto run = boost_tiny("torch_ddp", {}, world(), 2, 100);
    auto log = std::make_shared<GradientsAgree>();
    Trainer trainer(*run.booster, run.boosted,
                    TrainerOptions().grad_accum(3).sync_every_microbatch(sync_every_microbatch).max_steps(1).progress(false));
    trainer.fit(*run.boosted.dataloader, 1, nullptr, 1, {log});
    return log->agreed;
  };
  // Under no_sync only the step's last micro-batch is averaged; synchronised, every one is.
  // (One step of three micro-batches of 2: 48 images leave each of 8 ranks three.)
  EXPECT_EQ(agreement(false), (std::vector<bool>{false, false, true}));
  EXPECT_EQ(agreement(true), std::vector<bool>(3, true));
}

TEST(Trainer, MatchesTheHandWrittenLoopUnderATwoStagePipeline) {
  if (world()->size() % 2 != 0) GTEST_SKIP() << "a pipeline of two stages needs an even world";
  auto group = consecutive_group(2, "trainer_pipeline");
  expect_trainer_matches_hand_loop("hybrid_parallel", {{"pp_size", "2"}, {"num_microbatches", "2"}}, group, 4, 1);
  // No rank tears its pair's groups down while its partner still talks over them.
  world()->barrier().wait();
}

TEST(Trainer, GradientAccumulationUnderAPipelineIsRefusedSayingWhatToSet) {
  if (world()->size() % 2 != 0) GTEST_SKIP() << "a pipeline of two stages needs an even world";
  auto group = consecutive_group(2, "trainer_pipeline_accum");
  auto run = boost_tiny("hybrid_parallel", {{"pp_size", "2"}, {"num_microbatches", "2"}}, group, 4, 10);
  Trainer trainer(*run.booster, run.boosted, TrainerOptions().grad_accum(2).progress(false));
  try {
    trainer.fit(*run.boosted.dataloader, 1);
    ADD_FAILURE() << "grad_accum 2 under a pipeline was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("microbatch option"), std::string::npos) << e.what();
  }
  // fit refuses before any communication: without this a rank could close the pair's connections
  // while its partner was still inside boost's last collective (seen once at 8 ranks: "Connection
  // closed by peer" on the partner).
  world()->barrier().wait();
}

// Records every record a hook is shown, and counts the events.
class EventLog : public TrainerHook {
 public:
  void before_fit(Trainer&) override { ++fits; }
  void before_epoch(Trainer&) override { ++epochs; }
  void before_step(Trainer&) override { ++steps; }
  void end_step(Trainer&) override { ++ended_steps; }
  void evaluation_batch(Trainer&, const at::Tensor& logits, const at::Tensor&) override { images += logits.size(0); }
  void report(Trainer&, const Record& record) override { records.push_back(record); }
  int fits = 0, epochs = 0, steps = 0, ended_steps = 0;
  int64_t images = 0;
  std::vector<Record> records;
};

TEST(Trainer, HooksLogLossLrAccuracyAndThroughput) {
  auto run = boost_tiny("torch_ddp", {}, world(), 4, 100);
  auto test_loader = trainer_loader(trainer_test_set(), run.boosted, 8, false);
  auto events = std::make_shared<EventLog>();
  auto losses = std::make_shared<StepLosses>();
  std::vector<double> lrs;
  Trainer trainer(*run.booster, run.boosted, TrainerOptions().log_every(3).progress(false));
  const int64_t steps_per_epoch = run.boosted.dataloader->num_batches();
  const auto fit = trainer.fit(
      *run.boosted.dataloader, 2, test_loader.get(), 1,
      {std::make_shared<LRSchedulerHook>(), std::make_shared<LossHook>(), std::make_shared<AccuracyHook>(),
       std::make_shared<ThroughputHook>(ThroughputOptions().flops_per_image(1e6).peak_flops_per_device(1e9)), losses,
       events});
  EXPECT_EQ(fit.steps, 2 * steps_per_epoch);
  EXPECT_EQ(events->fits, 1);
  EXPECT_EQ(events->epochs, 2);
  EXPECT_EQ(events->steps, fit.steps);
  EXPECT_EQ(events->ended_steps, fit.steps);
  // The scheduler stepped once per step.
  EXPECT_EQ(run.boosted.lr_scheduler->step_count(), fit.steps);

  // Training records every 3 steps and at the last; each loss is the mean of its window's losses.
  int64_t window_start = 0, eval_records = 0;
  for (const auto& record : events->records) {
    if (record.text_of("event") == "eval") {
      ++eval_records;
      // Every test image counted once over the data-parallel shards (each rank saw its shard only).
      EXPECT_EQ(record.number("images"), 20);
      EXPECT_GE(record.number("top1"), 0.0);
      EXPECT_LE(record.number("top1"), 1.0);
      EXPECT_TRUE(std::isfinite(record.number("loss")));
      continue;
    }
    const auto step = static_cast<int64_t>(record.number("step"));
    EXPECT_TRUE(step % 3 == 0 || step == fit.steps) << step;
    double sum = 0;
    for (int64_t s = window_start; s < step; ++s) sum += losses->losses[s];
    EXPECT_NEAR(record.number("loss"), sum / static_cast<double>(step - window_start), 1e-9) << "step " << step;
    window_start = step;
    EXPECT_GT(record.number("images_per_s"), 0.0);
    // The longest wait of any rank: the same number on every rank.
    EXPECT_GE(record.number("data_wait_s"), 0.0);
    auto waits = torch::tensor({record.number("data_wait_s"), -record.number("data_wait_s")}, torch::kFloat64)
                     .to(device());
    world()->all_reduce(waits, dist::ReduceOp::kMax).wait();
    EXPECT_EQ(waits[0].item<double>(), -waits[1].item<double>()) << "step " << step;
    EXPECT_NEAR(record.number("mfu"), record.number("images_per_s") * 1e6 / (1e9 * world()->size()), 1e-9);
    EXPECT_GT(record.number("lr"), 0.0);
    EXPECT_TRUE(record.has("elapsed_s") && record.has("skipped_steps"));
  }
  EXPECT_EQ(window_start, fit.steps);
  EXPECT_EQ(eval_records, 2);
  // Each rank evaluated its shard only: 20 images over the world, padding left out.
  auto counted = torch::tensor({static_cast<double>(events->images)}, torch::kFloat64).to(device());
  world()->all_reduce(counted).wait();
  EXPECT_EQ(counted.cpu().item<double>(), 2 * 20);

  // The accuracy of the last evaluation, by hand over the whole test set (every rank holds the
  // same model under torch_ddp).
  torch::NoGradGuard no_grad;
  run.boosted.model->eval();
  data::DataLoader whole(trainer_test_set(), data::DataLoaderOptions(20).device(device()));
  auto batch = whole.next();
  const auto logits = run.boosted.model->forward(batch->images);
  const double top1 = logits.argmax(1).eq(batch->labels).sum().item<double>() / 20.0;
  EXPECT_DOUBLE_EQ(fit.last_evaluation.number("top1"), top1);
}

TEST(Trainer, MetricsLogWritesEveryRecordAsAJsonLineOnRankZero) {
  const auto dir = shared_directory("trainer_metrics");
  const auto path = files::join(dir, "metrics.jsonl");
  {
    auto run = boost_tiny("torch_ddp", {}, world(), 2, 100);
    auto test_loader = trainer_loader(trainer_test_set(), run.boosted, 8, false);
    Trainer trainer(*run.booster, run.boosted, TrainerOptions().log_every(2).max_steps(5).progress(false));
    trainer.fit(*run.boosted.dataloader, 3, test_loader.get(), 1,
                {std::make_shared<LRSchedulerHook>(), std::make_shared<LossHook>(), std::make_shared<AccuracyHook>(),
                 std::make_shared<MetricsLogHook>(world()->rank() == 0 ? path : "", false)});
  }
  if (world()->rank() == 0) {
    std::ifstream in(path);
    std::vector<nlohmann::json> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
    // Steps 2, 4, 5 (the last) and the evaluation after the last step; an epoch of 48 / (2 x world)
    // steps may end first (then one evaluation per epoch).
    std::vector<int64_t> train_steps;
    int evals = 0;
    for (const auto& line : lines) {
      if (line.at("event") == "train") {
        train_steps.push_back(line.at("step").get<int64_t>());
        EXPECT_TRUE(line.at("step").is_number_integer());
        EXPECT_TRUE(line.at("loss").is_number_float());
        EXPECT_TRUE(line.contains("lr"));
      } else {
        ++evals;
        EXPECT_TRUE(line.at("top1").is_number());
        EXPECT_EQ(line.at("images").get<int64_t>(), 20);
      }
    }
    EXPECT_EQ(train_steps, (std::vector<int64_t>{2, 4, 5}));
    EXPECT_GE(evals, 1);
    EXPECT_EQ(lines.back().at("event"), "eval");
    EXPECT_EQ(lines.back().at("step").get<int64_t>(), 5);
  }
  remove_shared_directory(dir);
}

TEST(Trainer, CheckpointHookSavesEveryNStepsAStateThatResumes) {
  const auto dir = shared_directory("trainer_checkpoint");
  int64_t saved_at = 0;
  int64_t batches_per_epoch = 0;
  {
    auto run = boost_tiny("torch_ddp", {}, world(), 2, 100);
    batches_per_epoch = run.boosted.dataloader->num_batches();
    Trainer trainer(*run.booster, run.boosted, TrainerOptions().max_steps(5).progress(false));
    trainer.fit(*run.boosted.dataloader, 3, nullptr, 1,
                {std::make_shared<LRSchedulerHook>(),
                 std::make_shared<CheckpointHook>(
                     dir, CheckpointOptions().every_steps(2).at_epoch_end(false).extra_files({{"note.txt", "hi\n"}}))});
    saved_at = 4;  // steps 2 and 4; the end (5) is not a multiple and epoch-end saves are off
  }
  const auto state = StateDirectory::resolve(dir);
  EXPECT_NE(state.find("step-00000004"), std::string::npos) << state;
  EXPECT_TRUE(files::exists(files::join(state, "note.txt")));
  auto run = boost_tiny("torch_ddp", {}, world(), 2, 100);  // the saved run's batch: its data position
  const auto progress = run.booster->load_state(run.boosted, state);
  EXPECT_EQ(progress.global_step, saved_at);
  EXPECT_EQ(run.boosted.lr_scheduler->step_count(), saved_at);
  // The data position after 4 batches of one per step (12, 6 and 3 batches per epoch at 2, 4 and 8
  // ranks: epoch 0 batch 4, epoch 0 batch 4, epoch 1 batch 1), saved and put back into the loader.
  ASSERT_GT(batches_per_epoch, 0);
  const data::DataLoaderState position{(saved_at - 1) / batches_per_epoch,
                                       saved_at - (saved_at - 1) / batches_per_epoch * batches_per_epoch};
  EXPECT_EQ(progress.data.epoch, position.epoch);
  EXPECT_EQ(progress.data.next_batch, position.next_batch);
  EXPECT_EQ(progress.epoch, position.epoch);
  EXPECT_TRUE(run.boosted.dataloader->state() == position)
      << "the loader resumed at epoch " << run.boosted.dataloader->state().epoch << " batch "
      << run.boosted.dataloader->state().next_batch;
  remove_shared_directory(dir);
}

// A new run's CheckpointHook refuses, at start-up on every rank, a directory that holds another
// run's state, and leaves that state as it was; with StateDirectoryOptions::overwrite it replaces
// it once its own state is published.
TEST(Trainer, CheckpointHookRefusesAnotherRunsStateAtStartUpAndLeavesIt) {
  const auto dir = shared_directory("trainer_checkpoint_foreign");
  const auto foreign = files::join(dir, "step-00000003");
  if (world()->rank() == 0) {
    files::create_directories(foreign);
    std::ofstream(files::join(foreign, "training_state.json")) << "another run's";
  }
  world()->barrier().wait();
  {
    auto run = boost_tiny("torch_ddp", {}, world(), 2, 100);
    Trainer trainer(*run.booster, run.boosted, TrainerOptions().max_steps(2).progress(false));
    try {
      trainer.fit(*run.boosted.dataloader, 1, nullptr, 1, {std::make_shared<CheckpointHook>(dir)});
      ADD_FAILURE() << "the run saved into another run's directory";
    } catch (const std::runtime_error& e) {
      const std::string message = e.what();
      const std::string expected =
          world()->rank() == 0 ? "holds the saved state of another run (step-00000003)" : "rank 0 cannot save there";
      EXPECT_NE(message.find(expected), std::string::npos) << message;
    }
    EXPECT_EQ(trainer.global_step(), 0);  // at start-up, not at the first save
  }
  world()->barrier().wait();
  EXPECT_TRUE(files::exists(files::join(foreign, "training_state.json")));
  {
    auto run = boost_tiny("torch_ddp", {}, world(), 2, 100);
    Trainer trainer(*run.booster, run.boosted, TrainerOptions().max_steps(2).progress(false));
    trainer.fit(*run.boosted.dataloader, 1, nullptr, 1,
                {std::make_shared<CheckpointHook>(
                    dir, CheckpointOptions().state_directory(StateDirectoryOptions().overwrite(true)))});
  }
  world()->barrier().wait();
  EXPECT_FALSE(files::exists(foreign));
  EXPECT_NE(StateDirectory::resolve(dir).find("step-00000002"), std::string::npos);
  remove_shared_directory(dir);
}

// Asynchronous saves through the hook publish the same states as synchronous ones, each once
// every rank's files are in; fit() returns only once the last is published.
TEST(Trainer, CheckpointHookSavesAsynchronouslyTheStatesASynchronousRunSaves) {
  const auto sync_dir = shared_directory("trainer_checkpoint_sync");
  const auto async_dir = shared_directory("trainer_checkpoint_async");
  for (const bool async : {false, true}) {
    auto run = boost_tiny("torch_ddp", {}, world(), 2, 100);
    Trainer trainer(*run.booster, run.boosted, TrainerOptions().max_steps(5).progress(false));
    const auto save = SaveOptions().async(async).before_background_write(
        [] { std::this_thread::sleep_for(std::chrono::milliseconds(200)); });
    trainer.fit(*run.boosted.dataloader, 3, nullptr, 1,
                {std::make_shared<LRSchedulerHook>(),
                 std::make_shared<CheckpointHook>(async ? async_dir : sync_dir, CheckpointOptions()
                                                                                    .every_steps(2)
                                                                                    .at_epoch_end(false)
                                                                                    .extra_files({{"note.txt", "hi\n"}})
                                                                                    .save(save))});
  }
  world()->barrier().wait();
  const auto sync_state = StateDirectory::resolve(sync_dir);
  const auto async_state = StateDirectory::resolve(async_dir);
  EXPECT_NE(async_state.find("step-00000004"), std::string::npos) << async_state;
  if (world()->rank() == 0) {
    const auto names = files::list_directory(sync_state);
    EXPECT_EQ(files::list_directory(async_state), names);
    for (const auto& name : names) {
      std::ifstream got(files::join(async_state, name), std::ios::binary);
      std::ifstream want(files::join(sync_state, name), std::ios::binary);
      EXPECT_TRUE(std::string(std::istreambuf_iterator<char>(got), {}) ==
                  std::string(std::istreambuf_iterator<char>(want), {}))
          << name;
    }
  }
  auto run = boost_tiny("torch_ddp", {}, world(), 2, 100);
  EXPECT_EQ(run.booster->load_state(run.boosted, async_state).global_step, 4);
  remove_shared_directory(sync_dir);
  remove_shared_directory(async_dir);
}

// Holds the step after `step` on this rank until its asynchronous save has finished writing, so
// that the next step's check sees a failure deterministically.
class HoldUntilTheSaveIsWritten : public TrainerHook {
 public:
  HoldUntilTheSaveIsWritten(int64_t step, bool hold) : step_(step), hold_(hold) {}
  void before_step(Trainer& trainer) override {
    if (!hold_ || trainer.global_step() != step_) return;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!trainer.booster().save_finished() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

 private:
  int64_t step_;
  bool hold_;
};

// One rank's writer fails (here: the last rank's, at the second save): every rank stops at the
// next step with an error that says so, and latest still names the state before.
TEST(Trainer, AnAsynchronousSaveThatFailsEndsTheRunOnEveryRankAtTheNextStep) {
  const auto dir = shared_directory("trainer_checkpoint_async_failure");
  const bool failing_rank = world()->rank() == world()->size() - 1;
  auto saves = std::make_shared<std::atomic<int>>(0);
  {
    auto run = boost_tiny("torch_ddp", {}, world(), 2, 100);
    Trainer trainer(*run.booster, run.boosted, TrainerOptions().max_steps(10).progress(false));
    const auto save = SaveOptions().async(true).before_background_write([saves, failing_rank] {
      if (++*saves == 2 && failing_rank) throw std::runtime_error("injected: the disk is full");
    });
    try {
      trainer.fit(*run.boosted.dataloader, 3, nullptr, 1,
                  {std::make_shared<HoldUntilTheSaveIsWritten>(4, failing_rank),
                   std::make_shared<CheckpointHook>(
                       dir, CheckpointOptions().every_steps(2).at_epoch_end(false).save(save))});
      ADD_FAILURE() << "the run went on past a failed save";
    } catch (const std::runtime_error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("the asynchronous save of step 4 failed"), std::string::npos) << message;
      EXPECT_NE(message.find(failing_rank ? "on this rank: injected: the disk is full" : "on 1 other rank"),
                std::string::npos)
          << message;
    }
    EXPECT_EQ(trainer.global_step(), 5);
  }
  world()->barrier().wait();
  EXPECT_NE(StateDirectory::resolve(dir).find("step-00000002"), std::string::npos);
  remove_shared_directory(dir);
}

// CheckpointHook with resume_latest: the first run starts fresh (its directory holds nothing yet)
// and stops after step 3, having saved at 2; the second, the same program, continues from step 2
// and ends with the weights of a run that was never interrupted.
TEST(Trainer, CheckpointHookWithResumeLatestContinuesItsRunToTheUninterruptedWeights) {
  const auto dir = shared_directory("trainer_resume_latest");
  const auto fit_until = [&](const std::string& into, int64_t max_steps, bool resume) {
    auto run = boost_tiny("torch_ddp", {}, world(), 2, 100);
    Trainer trainer(*run.booster, run.boosted, TrainerOptions().max_steps(max_steps).progress(false));
    const FitResult result = trainer.fit(
        *run.boosted.dataloader, 3, nullptr, 1,
        {std::make_shared<LRSchedulerHook>(),
         std::make_shared<CheckpointHook>(
             into, CheckpointOptions().every_steps(2).at_epoch_end(false).resume_latest(resume))});
    return std::make_pair(result, named_state(run.boosted.model->full_state()));
  };
  const auto first = fit_until(dir, 3, true);
  EXPECT_EQ(first.first.steps, 3);  // fresh: nothing to resume
  const auto resumed = fit_until(dir, 5, true);
  EXPECT_EQ(resumed.first.steps, 3) << "steps 3, 4 and 5 after the state of step 2";
  EXPECT_EQ(resumed.first.global_step, 5);
  const auto uninterrupted = fit_until(files::join(dir, "uninterrupted"), 5, false);
  ASSERT_EQ(resumed.second.size(), uninterrupted.second.size());
  for (const auto& [name, tensor] : uninterrupted.second) {
    EXPECT_TRUE(torch::equal(resumed.second.at(name), tensor)) << name << " differs from the uninterrupted run's";
  }
  remove_shared_directory(dir);
}

TEST(Trainer, NonFiniteLossHookStopsADivergedRun) {
  // Rank 0's loss is NaN from the start: every rank stops at the first check.
  Criterion nan_on_rank0 = [](const torch::Tensor& output, const torch::Tensor& target) {
    auto loss = cross_entropy(output, target);
    return world()->rank() == 0 ? loss * std::numeric_limits<double>::quiet_NaN() : loss;
  };
  auto run = boost_tiny("torch_ddp", {}, world(), 2, 100, nan_on_rank0);
  auto events = std::make_shared<EventLog>();
  Trainer trainer(*run.booster, run.boosted, TrainerOptions().progress(false));
  try {
    trainer.fit(*run.boosted.dataloader, 1, nullptr, 1,
                {events, std::make_shared<NonFiniteLossHook>(NonFiniteLossOptions().max_steps(3))});
    ADD_FAILURE() << "the run went on";
  } catch (const NonFiniteLossError& e) {
    EXPECT_NE(std::string(e.what()).find("stopped at step 3: "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("max_nonfinite_steps 3 is the limit"), std::string::npos) << e.what();
  }
  EXPECT_EQ(events->steps, 3);
}

// Adds "score" to the records of one event, from a fixed sequence (the same on every rank, as a
// reduced metric is), so that a test controls what EarlyStoppingHook sees.
class ScriptedScore : public TrainerHook {
 public:
  ScriptedScore(std::string event, std::vector<double> scores) : event_(std::move(event)), scores_(std::move(scores)) {}
  void collect(Trainer&, Record& record) override {
    if (record.text_of("event") != event_) return;
    record.real("score", scores_.at(std::min(next_++, scores_.size() - 1)));
  }
  std::size_t shown() const { return next_; }

 private:
  std::string event_;
  std::vector<double> scores_;
  std::size_t next_ = 0;
};

TEST(Trainer, EarlyStoppingEndsTheRunWhenTheEvaluationStalls) {
  auto run = boost_tiny("torch_ddp", {}, world(), 2, 100);
  auto test_loader = trainer_loader(trainer_test_set(), run.boosted, 8, false);
  // Best 0.6 at the second evaluation; the third ties it and the fourth is worse: patience 2 ends
  // the run after the fourth epoch, of ten.
  auto score = std::make_shared<ScriptedScore>("eval", std::vector<double>{0.5, 0.6, 0.6, 0.55, 0.9});
  auto stopper = std::make_shared<EarlyStoppingHook>(EarlyStoppingOptions().metric("score").patience(2));
  auto events = std::make_shared<EventLog>();
  Trainer trainer(*run.booster, run.boosted, TrainerOptions().progress(false));
  const int64_t steps_per_epoch = run.boosted.dataloader->num_batches();
  const auto fit = trainer.fit(*run.boosted.dataloader, 10, test_loader.get(), 1, {score, stopper, events});
  EXPECT_TRUE(fit.stopped);
  EXPECT_EQ(fit.stop_reason, "score has not improved on its best, 0.6, for 2 eval records (patience 2)");
  EXPECT_EQ(fit.steps, 4 * steps_per_epoch);
  EXPECT_EQ(events->epochs, 4);
  EXPECT_EQ(score->shown(), 4u);  // no second evaluation of the last step
  EXPECT_DOUBLE_EQ(stopper->best(), 0.6);
  EXPECT_DOUBLE_EQ(fit.last_evaluation.number("score"), 0.55);
}

TEST(Trainer, EarlyStoppingOnTrainingRecordsStopsMidEpochKeepingTheLoadersPlace) {
  auto run = boost_tiny("torch_ddp", {}, world(), 2, 100);
  // A record every step; the loss-like score does not fall after the first: patience 1 stops at
  // step 2, before the first epoch (48 / (2 x world) >= 3 steps) is over.
  auto score = std::make_shared<ScriptedScore>("train", std::vector<double>{1.0, 1.0});
  Trainer trainer(*run.booster, run.boosted, TrainerOptions().log_every(1).progress(false));
  const auto fit = trainer.fit(
      *run.boosted.dataloader, 2, nullptr, 1,
      {score, std::make_shared<EarlyStoppingHook>(
                  EarlyStoppingOptions().metric("score").event("train").higher_is_better(false).patience(1))});
  EXPECT_TRUE(fit.stopped);
  EXPECT_EQ(fit.steps, 2);
  EXPECT_EQ(run.boosted.dataloader->epoch(), 0);
  // The next fit() goes on from there, with no stop carried over.
  Trainer again(*run.booster, run.boosted, TrainerOptions().start_step(2).max_steps(3).progress(false));
  const auto more = again.fit(*run.boosted.dataloader, 2, nullptr, 1, {});
  EXPECT_FALSE(more.stopped);
  EXPECT_EQ(more.global_step, 3);
}

TEST(Trainer, EarlyStoppingOnAFieldTheRecordsLackSaysWhichTheyHave) {
  auto run = boost_tiny("torch_ddp", {}, world(), 2, 100);
  auto test_loader = trainer_loader(trainer_test_set(), run.boosted, 8, false);
  Trainer trainer(*run.booster, run.boosted, TrainerOptions().max_steps(1).progress(false));
  try {
    trainer.fit(*run.boosted.dataloader, 1, test_loader.get(), 1,
                {std::make_shared<AccuracyHook>(), std::make_shared<EarlyStoppingHook>()});
    trainer.fit(*run.boosted.dataloader, 1, test_loader.get(), 1,
                {std::make_shared<LossHook>(), std::make_shared<EarlyStoppingHook>()});
    ADD_FAILURE() << "watching top1 without AccuracyHook went on";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("EarlyStoppingHook watches 'top1', which the eval records lack (they have: "),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("loss"), std::string::npos) << what;
    EXPECT_NE(what.find("AccuracyHook: top1"), std::string::npos) << what;
  }
  EXPECT_THROW(EarlyStoppingHook(EarlyStoppingOptions().patience(0)), std::invalid_argument);
  EXPECT_THROW(EarlyStoppingHook(EarlyStoppingOptions().event("epoch")), std::invalid_argument);
}

// Sleeps once, after the first step: the loader's threads then prepare every remaining batch of
// the epoch (they fit in its prefetch), so the later windows see no loader work at all.
class PauseAfterFirstStep : public TrainerHook {
 public:
  void after_step(Trainer&, const StepResult&) override {
    if (paused_) return;
    paused_ = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }

 private:
  bool paused_ = false;
};

// A window in which the loader did no work has no loader speed: the progress line shows "-" (not
// "nan") and the metrics leave the field out, as they do every rate they cannot measure.
TEST(Trainer, AWindowWithoutLoaderWorkPrintsADashAndLeavesTheSpeedOut) {
  const auto dir = shared_directory("trainer_idle_loader");
  const auto path = files::join(dir, "metrics.jsonl");
  auto run = boost_tiny("torch_ddp", {}, world(), 2, 100);
  // 48 images, 2 per rank and step (3 steps at 8 ranks): every batch of the epoch fits in the prefetch.
  run.boosted.dataloader = std::make_shared<data::DataLoader>(
      trainer_train_set(), data::DataLoaderOptions(2)
                               .shuffle(true)
                               .drop_last(true)
                               .seed(9)
                               .num_replicas(world()->size())
                               .rank(world()->rank())
                               .num_workers(1)
                               .prefetch(64)
                               .device(device()));
  Trainer trainer(*run.booster, run.boosted,
                  TrainerOptions().log_every(1).max_steps(3).show_loader_speed(true).progress(true));
  testing::internal::CaptureStdout();
  trainer.fit(*run.boosted.dataloader, 1, nullptr, 1,
              {std::make_shared<PauseAfterFirstStep>(), std::make_shared<ThroughputHook>(),
               std::make_shared<MetricsLogHook>(world()->rank() == 0 ? path : "", false)});
  const std::string printed = testing::internal::GetCapturedStdout();
  if (world()->rank() == 0) {
    EXPECT_EQ(printed.find("nan"), std::string::npos) << printed;
    EXPECT_NE(printed.find("data - img/s/core"), std::string::npos) << printed;
    std::ifstream in(path);
    int lines = 0, without_speed = 0;
    for (std::string line; std::getline(in, line); ++lines) {
      const auto record = nlohmann::json::parse(line);
      for (const auto& [key, value] : record.items()) EXPECT_FALSE(value.is_null()) << key << " in " << line;
      if (!record.contains("loader_images_per_cpu_s")) ++without_speed;
    }
    EXPECT_EQ(lines, 3);  // at 8 ranks the epoch has 3 steps
    EXPECT_GE(without_speed, 1);
  }
  remove_shared_directory(dir);
}

}  // namespace
}  // namespace colo::test
