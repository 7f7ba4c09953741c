// Trainer::evaluate: the Trainer splits the test loader over the data-parallel ranks itself (each
// image counted once, uneven last shards included), runs the evaluation hooks on its own
// (outside fit()), and through a pipeline forwards in microbatches of their own size
// (hybrid_parallel's eval_microbatch_size) with the same results as the training size. On 2, 4
// and 8 ranks: 21 test images never split evenly.
#include <colo/booster/booster.h>
#include <colo/trainer/trainer.h>
#include <colo/trainer/trainer_hooks.h>
#include <colo/data/data_loader.h>
#include <colo/data/synthetic_dataset.h>
#include <colo/dist/process_group.h>
#include <colo/dist/process_group_mesh.h>
#include <colo/nn/layer.h>
#include <colo/nn/layer_stack.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "dist_test_env.h"
#include "plugin_equivalence.h"

namespace colo::test {
namespace {

constexpr int64_t kTestImages = 21;

std::shared_ptr<const data::Dataset> evaluation_set() {
  return std::make_shared<data::SyntheticDataset>(kTestImages, data::ImageShape{3, 16, 16}, 10, 6);
}

// A loader over the whole test set, as a user builds it without knowing the ranks.
data::DataLoader whole_test_loader(int64_t batch) {
  return data::DataLoader(evaluation_set(), data::DataLoaderOptions(batch).device(device()));
}

// tiny_vit() (or `config`) with every bias and LayerNorm randomised (a fresh one has them 0 and 1).
std::shared_ptr<nn::LayerStack> evaluation_vit(const nn::ViTConfig& config = tiny_vit()) {
  auto model = make_vit(config, 11);
  torch::NoGradGuard no_grad;
  torch::manual_seed(12);
  for (auto& p : model->parameters()) {
    if (p.dim() == 1) p.add_(0.3 * torch::randn_like(p));
  }
  return model;
}

// The loss and top-1 over the whole test set, by one process with the whole model.
struct WholeSet {
  double loss = 0, top1 = 0;
};
WholeSet by_hand(nn::LayerStack& model) {
  torch::NoGradGuard no_grad;
  model.eval();
  data::DataLoader all(evaluation_set(), data::DataLoaderOptions(kTestImages).device(device()));
  const auto batch = all.next();
  const auto logits = model.forward(batch->images).to(torch::kFloat);
  model.train();
  return {cross_entropy(logits, batch->labels).item<double>(),
          logits.argmax(1).eq(batch->labels).sum().item<double>() / static_cast<double>(kTestImages)};
}

// What the evaluation events a hook saw were, and how many images it was given on this rank.
class EvaluationEvents : public TrainerHook {
 public:
  void before_evaluation(Trainer&) override { ++evaluations; }
  void evaluation_batch(Trainer&, const at::Tensor&, const at::Tensor& labels) override { images += labels.size(0); }
  void collect(Trainer&, Record& record) override {
    ++collects;
    record.real("user_field", 0.5);
  }
  void report(Trainer&, const Record& record) override {
    ++reports;
    reported = record;
  }
  int evaluations = 0, collects = 0, reports = 0;
  int64_t images = 0;
  Record reported;
};

double summed_over_world(double value) {
  auto t = torch::tensor({value}, torch::kFloat64).to(device());
  world()->all_reduce(t).wait();
  return t.cpu().item<double>();
}

TEST(TrainerEvaluation, AWholeTestSetLoaderIsShardedByTheTrainerCountingEachImageOnce) {
  auto model = evaluation_vit();
  const WholeSet want = by_hand(*model);
  Booster booster(make_plugin("torch_ddp", {}, world()));
  auto b = booster.boost(model, conditioned_adamw(*model), cross_entropy);
  auto loader = whole_test_loader(4);
  auto events = std::make_shared<EvaluationEvents>();
  Trainer trainer(booster, b, TrainerOptions().progress(false));
  const Record record =
      trainer.evaluate(loader, {std::make_shared<LossHook>(), std::make_shared<AccuracyHook>(), events});
  // 21 images over 2, 4 or 8 ranks: shards of 11, 6 or 3 with the padding left out.
  EXPECT_EQ(loader.sampler().num_replicas(), world()->size());
  EXPECT_EQ(summed_over_world(static_cast<double>(events->images)), kTestImages);
  EXPECT_EQ(record.number("images"), kTestImages);
  EXPECT_DOUBLE_EQ(record.number("top1"), want.top1);
  EXPECT_NEAR(record.number("loss"), want.loss, 1e-5 * want.loss);
  // A second evaluation of the same (now sharded) loader counts the same.
  events->images = 0;
  EXPECT_DOUBLE_EQ(trainer.evaluate(loader, {std::make_shared<AccuracyHook>(), events}).number("top1"), want.top1);
  EXPECT_EQ(summed_over_world(static_cast<double>(events->images)), kTestImages);
}

TEST(TrainerEvaluation, OutsideFitItRunsTheHooksAndWithoutAnyMeasuresLossAndTop1) {
  auto model = evaluation_vit();
  const WholeSet want = by_hand(*model);
  Booster booster(make_plugin("torch_ddp", {}, world()));
  auto b = booster.boost(model, conditioned_adamw(*model), cross_entropy);
  auto loader = whole_test_loader(5);
  Trainer trainer(booster, b, TrainerOptions().progress(false));

  const Record plain = trainer.evaluate(loader);
  EXPECT_EQ(plain.text_of("event"), "eval");
  EXPECT_FALSE(plain.has("epoch")) << "no fit() ran: there is no epoch to name";
  EXPECT_DOUBLE_EQ(plain.number("top1"), want.top1);
  EXPECT_NEAR(plain.number("loss"), want.loss, 1e-5 * want.loss);

  auto events = std::make_shared<EvaluationEvents>();
  const Record hooked = trainer.evaluate(loader, {events});
  EXPECT_EQ(events->evaluations, 1);
  EXPECT_EQ(events->collects, 1);
  EXPECT_EQ(events->reports, 1);
  EXPECT_EQ(hooked.number("user_field"), 0.5);
  EXPECT_EQ(events->reported.number("user_field"), 0.5);
  EXPECT_EQ(summed_over_world(static_cast<double>(events->images)), kTestImages);
}

TEST(TrainerEvaluation, ALoaderThatDropsImagesIsRefusedSayingHowMany) {
  auto model = evaluation_vit();
  Booster booster(make_plugin("torch_ddp", {}, world()));
  auto b = booster.boost(model, conditioned_adamw(*model), cross_entropy);
  data::DataLoader loader(evaluation_set(), data::DataLoaderOptions(4).drop_last(true).device(device()));
  Trainer trainer(booster, b, TrainerOptions().progress(false));
  try {
    trainer.evaluate(loader);
    ADD_FAILURE() << "a drop_last test loader was evaluated";
  } catch (const std::invalid_argument& e) {
    // One replica of batches of 4: 20 of the 21 images, 1 left out.
    EXPECT_NE(std::string(e.what()).find("drop_last): 1 of its 21 images would not be evaluated"), std::string::npos)
        << e.what();
  }
}

// hybrid_parallel with pp 2 (and tp 2 where the world has 4 or 8 ranks) trained at
// microbatch_size=1.
PluginOptions pipeline_options(const std::string& eval_microbatch_size) {
  PluginOptions options{{"pp_size", "2"},
                        {"tp_size", world()->size() % 4 == 0 ? "2" : "1"},
                        {"microbatch_size", "1"}};
  if (!eval_microbatch_size.empty()) options["eval_microbatch_size"] = eval_microbatch_size;
  return options;
}

TEST(TrainerEvaluation, APipelineEvaluatesInLargerMicrobatchesWithTheSameResults) {
  if (world()->size() % 2 != 0) GTEST_SKIP() << "a pipeline of two stages needs an even world";
  const WholeSet want = by_hand(*evaluation_vit());
  std::vector<Record> records;
  for (const std::string eval_size : {"1", ""}) {
    Booster booster(make_plugin("hybrid_parallel", pipeline_options(eval_size), world()));
    auto model = evaluation_vit();
    auto b = booster.boost(model, conditioned_adamw(*model), cross_entropy);
    auto loader = whole_test_loader(8);
    Trainer trainer(booster, b, TrainerOptions().progress(false));
    records.push_back(trainer.evaluate(loader));
  }
  // Every image once over the data-parallel shards, tensor-parallel peers alike: the whole set's.
  for (const auto& record : records) {
    EXPECT_DOUBLE_EQ(record.number("top1"), want.top1);
    EXPECT_NEAR(record.number("loss"), want.loss, 1e-5 * want.loss);
  }
  EXPECT_NEAR(records[1].number("loss"), records[0].number("loss"), 1e-6 * records[0].number("loss"));
}

// The first layer of a model: passes its input on and records its batch size, which under a
// pipeline is the microbatch's.
class BatchSizeProbe : public nn::Layer {
 public:
  explicit BatchSizeProbe(std::shared_ptr<std::vector<int64_t>> sizes) : sizes_(std::move(sizes)) {}
  torch::Tensor forward(const torch::Tensor& x) override {
    sizes_->push_back(x.size(0));
    return x;
  }

 private:
  std::shared_ptr<std::vector<int64_t>> sizes_;
};

// The microbatch sizes stage 0 forwards a batch of `batch` images in (empty on the other stage).
std::vector<int64_t> forward_only_microbatches(const PluginOptions& options, int64_t batch,
                                               const std::shared_ptr<dist::ProcessGroup>& group) {
  Booster booster(make_plugin("hybrid_parallel", options, group));
  auto sizes = std::make_shared<std::vector<int64_t>>();
  // A probe and four blocks: two chunks on each of two stages need four places (the head goes
  // with the last block).
  auto vit = evaluation_vit(tiny_vit().depth(4));
  auto model = std::make_shared<nn::LayerStack>();
  model->push_back(std::make_shared<BatchSizeProbe>(sizes));
  for (const auto& layer : vit->layers()) model->push_back(layer);
  auto b = booster.boost(model, conditioned_adamw(*model), cross_entropy);
  torch::NoGradGuard no_grad;
  b.model->eval();
  torch::manual_seed(5);
  const auto images = torch::randn({batch, 3, 16, 16}).to(device());
  const auto forward = [&] {
    return booster.execute_pipeline(images, torch::Tensor(), *b.model, b.criterion, *b.optimizer,
                                    PipelineOptions().forward_only(true).return_outputs(true).return_loss(false));
  };
  // The first pass also forwards one microbatch of each new shape to learn what the next stage
  // receives: the second pass shows the split alone.
  forward();
  sizes->clear();
  const auto result = forward();
  if (result.outputs.defined()) {
    EXPECT_EQ(result.outputs.size(0), batch);
  }
  return *sizes;
}

TEST(TrainerEvaluation, ForwardOnlyPassesRunMicrobatchesOfTheirOwnSize) {
  if (world()->size() % 2 != 0) GTEST_SKIP() << "a pipeline of two stages needs an even world";
  auto group = consecutive_group(2, "trainer_eval_microbatches");
  const bool first_stage = group->rank() == 0;
  using Sizes = std::vector<int64_t>;
  auto expect = [&](const PluginOptions& options, int64_t batch, const Sizes& want) {
    const Sizes got = forward_only_microbatches(options, batch, group);
    if (first_stage) {
      EXPECT_EQ(got, want) << "batch " << batch << ", " << options.size() << " options";
    }
  };
  const PluginOptions one_at_a_time{{"pp_size", "2"}, {"microbatch_size", "1"}};
  // Trained one image at a time, evaluated in 2 x pp_size microbatches (of 2), not in 8 of one.
  expect(one_at_a_time, 8, {2, 2, 2, 2});
  expect(one_at_a_time, 3, {1, 1, 1});  // at most one microbatch per image
  auto with = [](PluginOptions options, const std::string& key, const std::string& value) {
    options[key] = value;
    return options;
  };
  // eval_microbatch_size, at its boundaries: 1, a size that does not divide 8, 8 - 1, 8, 8 + 1.
  expect(with(one_at_a_time, "eval_microbatch_size", "1"), 8, Sizes(8, 1));
  expect(with(one_at_a_time, "eval_microbatch_size", "3"), 8, {3, 3, 2});
  expect(with(one_at_a_time, "eval_microbatch_size", "7"), 8, {4, 4});
  expect(with(one_at_a_time, "eval_microbatch_size", "8"), 8, {8});
  expect(with(one_at_a_time, "eval_microbatch_size", "9"), 8, {8});
  // Interleaving takes microbatches in groups of pp: 3 rounds up to 4, and 3 images go in 2.
  const PluginOptions interleaved{{"pp_size", "2"},
                                  {"num_microbatches", "2"},
                                  {"pp_style", "interleaved"},
                                  {"num_model_chunks", "2"}};
  expect(with(interleaved, "eval_microbatch_size", "3"), 8, {2, 2, 2, 2});
  expect(with(interleaved, "eval_microbatch_size", "1"), 3, {2, 1});
  group->barrier().wait();
}

}  // namespace
}  // namespace colo::test
