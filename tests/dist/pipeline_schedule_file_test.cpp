// hybrid_parallel's pp_schedule_file: a schedule given as text trains exactly as the named
// schedule it was written from (pp 2 on two ranks, pp 2 x dp 2 and wider on more; interleaved with
// two chunks; zero bubble's W actions), its memory plan follows the file's order, and a bad file
// stops the plugin before any step, naming the file and the line.
#include <colo/booster/booster.h>
#include <colo/booster/memory_plan.h>
#include <colo/booster/plugin_registry.h>
#include <colo/dist/process_group.h>
#include <colo/dist/process_group_mesh.h>
#include <colo/files/files.h>
#include <colo/nn/model_summary.h>
#include <colo/pipeline/schedule_registry.h>
#include <colo/pipeline/schedule_text.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "dist_test_env.h"
#include "plugin_equivalence.h"

namespace colo {
namespace {

using namespace test;
using dist::MeshAxis;

// 9 layers once the head joins the last block: enough for pp 4 x 2 chunks.
std::shared_ptr<nn::LayerStack> schedule_file_vit() { return make_vit(tiny_vit().depth(8), 21); }

// `text` in a file of this rank's own (the option names a file each rank reads).
std::string write_schedule_text(const files::TemporaryDirectory& dir, const std::string& name, const std::string& text) {
  const auto path = dir / (name + ".txt");
  std::ofstream(path) << text;
  return path;
}

// The training schedule `style` makes for pp x num_microbatches x chunks, as a file.
std::string write_generated(const files::TemporaryDirectory& dir, const std::string& style, int pp, int microbatches,
                            int chunks = 1) {
  const auto schedule =
      pipeline::builtin_schedules().make(style, pipeline::ScheduleShape(pp, microbatches).chunks(chunks));
  return write_schedule_text(dir, fmt::format("{}_pp{}_m{}_c{}", style, pp, microbatches, chunks),
                             pipeline::schedule_to_text(schedule));
}

struct ScheduleFileRun {
  std::vector<double> losses;
  std::map<std::string, torch::Tensor> state;  // this rank's layers after the last step
  torch::Tensor evaluated;                     // a forward-only pass's outputs (last stage)
};

// Three training steps and one evaluation under hybrid_parallel with `options` on `group`,
// each data-parallel rank on its share of the same global batches.
ScheduleFileRun train_through_pipeline(const PluginOptions& options, const std::shared_ptr<dist::ProcessGroup>& group) {
  auto plugin = PluginRegistry::global().create("hybrid_parallel", options, PluginContext{group, device()});
  Booster booster(plugin);
  auto model = schedule_file_vit();
  auto b = booster.boost(model, conditioned_adamw(*model), cross_entropy);
  const int dp = b.mesh->size(MeshAxis::kDp), d = b.mesh->coordinate(MeshAxis::kDp);
  const auto data = make_batches(4, 8 * dp, 41);
  ScheduleFileRun run;
  for (int i = 0; i < 3; ++i) {
    b.optimizer->zero_grad();
    const auto result = booster.execute_pipeline(shard(data.images[i], d, dp), shard(data.labels[i], d, dp), *b.model,
                                                 b.criterion, *b.optimizer);
    run.losses.push_back(result.loss.item<double>());
    EXPECT_TRUE(b.optimizer->step());
  }
  for (const auto& [name, tensor] : b.model->full_state()) run.state[name] = tensor.detach().to(torch::kCPU).clone();
  // Evaluation runs its own forward-only schedule, for a count of its own (2 x pp microbatches).
  const auto evaluated = booster.execute_pipeline(shard(data.images[3], d, dp), shard(data.labels[3], d, dp), *b.model,
                                                  b.criterion, *b.optimizer,
                                                  PipelineOptions().forward_only(true).return_outputs(true));
  if (evaluated.outputs.defined()) run.evaluated = evaluated.outputs.to(torch::kCPU);
  return run;
}

// Trains with pp_style=`style` and with the file written from it, on a group of `size` ranks, and
// expects the same losses, weights and evaluation bit for bit.
void expect_file_trains_like_style(const std::string& style, int pp, int chunks, int size) {
  const int microbatches = 4;
  SCOPED_TRACE(fmt::format("{} pp {} chunks {} on {} ranks", style, pp, chunks, size));
  const auto group = consecutive_group(size, fmt::format("schedule_file_{}_{}_{}", style, pp, size));
  files::TemporaryDirectory dir("colo_schedule_file_");
  PluginOptions named{{"pp_size", std::to_string(pp)},
                      {"num_microbatches", std::to_string(microbatches)},
                      {"pp_style", style},
                      {"max_grad_norm", "1.0"}};
  if (chunks > 1) named["num_model_chunks"] = std::to_string(chunks);
  // The file sets the microbatches and the chunks itself.
  PluginOptions from_file{{"pp_size", std::to_string(pp)},
                          {"pp_schedule_file", write_generated(dir, style, pp, microbatches, chunks)},
                          {"max_grad_norm", "1.0"}};

  const auto want = train_through_pipeline(named, group);
  const auto got = train_through_pipeline(from_file, group);
  EXPECT_EQ(got.losses, want.losses);
  EXPECT_NE(want.losses.front(), want.losses.back()) << "the steps trained";
  ASSERT_EQ(got.state.size(), want.state.size());
  for (const auto& [name, tensor] : want.state) {
    ASSERT_TRUE(got.state.count(name)) << name;
    EXPECT_TRUE(torch::equal(got.state.at(name), tensor)) << name;
  }
  EXPECT_EQ(got.evaluated.defined(), want.evaluated.defined());
  if (want.evaluated.defined()) {
    EXPECT_TRUE(torch::equal(got.evaluated, want.evaluated)) << "evaluation outputs";
  }
  world()->barrier().wait();
}

// Group sizes to run a pp-wide layout on: pp ranks alone, then with data parallelism (pp x 2 and,
// on eight ranks, the whole world).
std::vector<int> group_sizes(int pp) {
  std::vector<int> sizes;
  for (int size : {pp, 2 * pp, 4 * pp}) {
    if (size <= world()->size() && world()->size() % size == 0) sizes.push_back(size);
  }
  return sizes;
}

TEST(PipelineScheduleFile, AOneFOneBFileTrainsExactlyLikePpStyle1f1b) {
  if (world()->size() < 2) GTEST_SKIP() << "a pipeline of two stages needs two ranks";
  for (int size : group_sizes(2)) expect_file_trains_like_style("1f1b", 2, 1, size);
}

TEST(PipelineScheduleFile, AnInterleavedFileTrainsExactlyLikePpStyleInterleaved) {
  if (world()->size() < 2) GTEST_SKIP() << "a pipeline of two stages needs two ranks";
  for (int size : group_sizes(2)) expect_file_trains_like_style("interleaved", 2, 2, size);
  if (world()->size() >= 4) expect_file_trains_like_style("interleaved", 4, 2, 4);
}

// W actions in the file split the backward, as pp_style=zero_bubble does.
TEST(PipelineScheduleFile, AZeroBubbleFileTrainsExactlyLikePpStyleZeroBubble) {
  if (world()->size() < 2) GTEST_SKIP() << "a pipeline of two stages needs two ranks";
  expect_file_trains_like_style("zero_bubble", 2, 1, 2);
}

// The memory plan counts the activations the file's order holds: GPipe's order holds every
// microbatch on rank 0, 1F1B's two of them.
TEST(PipelineScheduleFile, TheMemoryPlanFollowsTheFilesOrder) {
  files::TemporaryDirectory dir("colo_schedule_file_");
  MemoryPlanInputs in;
  in.model = nn::summarize(*schedule_file_vit());
  in.world_size(2).global_batch_size(8).device_is_gpu(false);
  const auto activations = [&](const PluginOptions& options) {
    const auto plan = Booster::plan_memory("hybrid_parallel", options, in);
    return plan.ranks.at(0).bytes_of("activations");
  };
  const PluginOptions pipeline{{"pp_size", "2"}, {"num_microbatches", "4"}};
  auto with = [&](const std::string& key, const std::string& value) {
    auto options = pipeline;
    options[key] = value;
    return options;
  };
  const auto gpipe = activations(with("pp_style", "gpipe"));
  const auto one_f_one_b = activations(with("pp_style", "1f1b"));
  ASSERT_GT(gpipe, one_f_one_b);
  EXPECT_EQ(activations(with("pp_schedule_file", write_generated(dir, "gpipe", 2, 4))), gpipe);
  EXPECT_EQ(activations(with("pp_schedule_file", write_generated(dir, "1f1b", 2, 4))), one_f_one_b);
}

std::string plugin_error(const PluginOptions& options) {
  try {
    PluginRegistry::global().create("hybrid_parallel", options, PluginContext{world(), device()});
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

void expect_mentions(const std::string& text, const std::vector<std::string>& parts) {
  for (const auto& part : parts) EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in:\n" << text;
}

TEST(PipelineScheduleFile, BadFilesAreRefusedBeforeAnyStepWithTheFileAndTheLine) {
  files::TemporaryDirectory dir("colo_schedule_file_");
  const auto one_f_one_b = write_generated(dir, "1f1b", 2, 4);
  const PluginOptions base{{"pp_size", "2"}, {"pp_schedule_file", one_f_one_b}};
  auto with = [&](PluginOptions more) {
    more.insert(base.begin(), base.end());
    return more;
  };

  // Each rank's order is valid, but they wait for each other in a circle.
  const auto deadlock = write_schedule_text(dir, "deadlock", "# waits in a circle\n0F0,0B0,0F1,0B1\n1F0,1F1,1B0,1B1\n");
  expect_mentions(plugin_error({{"pp_size", "2"}, {"pp_schedule_file", deadlock}}),
                  {"pp_schedule_file: the pipeline schedule in " + deadlock + " cannot run",
                   deadlock + ":2: rank 0 never runs its action 1 (0B0)",
                   deadlock + ":3: rank 1 never runs its action 1 (1F1)"});
  const auto typo = write_schedule_text(dir, "typo", "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1,1G1\n");
  expect_mentions(plugin_error({{"pp_size", "2"}, {"pp_schedule_file", typo}}),
                  {typo + ":2: rank 1's line: action 4 of the list: '1G1' is not a pipeline action"});
  const auto missing = dir / "missing.txt";
  expect_mentions(plugin_error({{"pp_size", "2"}, {"pp_schedule_file", missing}}),
                  {"the pipeline schedule file '" + missing + "' does not exist"});

  // The file against the other options.
  expect_mentions(plugin_error({{"pp_size", "4"}, {"pp_schedule_file", one_f_one_b}}),
                  {one_f_one_b + ":3: the text ends after 2 rank lines (this is rank 1's), but pp=4"});
  expect_mentions(plugin_error(with({{"num_microbatches", "8"}})),
                  {"the actions run microbatches 0 to 3 (4), but each step runs 8"});
  expect_mentions(plugin_error(with({{"num_microbatches", "3"}})),
                  {one_f_one_b + ":2: rank 0 action 5 (0F3): microbatch 3 is out of range [0, 3)"});
  expect_mentions(plugin_error(with({{"pp_style", "1f1b"}})), {"give pp_style or pp_schedule_file, not both"});
  expect_mentions(plugin_error(with({{"microbatch_size", "2"}})),
                  {"fixes the microbatches per step: give num_microbatches (or leave it to the file)"});
  expect_mentions(plugin_error(with({{"num_model_chunks", "2"}})),
                  {"num_model_chunks=2, but pp_schedule_file=" + one_f_one_b + " runs 1 model chunk per rank"});
  // A file with W actions splits the backward: what sequence parallelism cannot follow yet.
  const auto zero_bubble = write_generated(dir, "zero_bubble", 2, 4);
  expect_mentions(plugin_error({{"pp_size", "2"},
                                {"tp_size", "2"},
                                {"enable_sequence_parallelism", "true"},
                                {"pp_schedule_file", zero_bubble}}),
                  {"enable_sequence_parallelism with pp_schedule_file=" + zero_bubble +
                   " (its W actions split the backward) is not supported yet"});
}

// pp_style's choices are the registry's names: each is taken, and an unknown one is answered with
// all of them (a list of its own would drift from the registry).
TEST(PipelineScheduleFile, PpStyleTakesEveryRegisteredNameAndNoOther) {
  MemoryPlanInputs in;
  in.model = nn::summarize(*schedule_file_vit());
  in.world_size(2).global_batch_size(8).device_is_gpu(false);
  const auto& schedules = pipeline::builtin_schedules();
  for (const auto& entry : schedules.entries()) {
    PluginOptions options{{"pp_size", "2"}, {"num_microbatches", "4"}, {"pp_style", entry.name}};
    if (entry.supports_chunks) options["num_model_chunks"] = "2";
    EXPECT_NO_THROW(Booster::plan_memory("hybrid_parallel", options, in)) << entry.name;
  }
  const auto message = plugin_error({{"pp_size", "2"}, {"num_microbatches", "4"}, {"pp_style", "zb"}});
  expect_mentions(message, {fmt::format("pp_style='zb' is not one of {}", fmt::join(schedules.names(), ", "))});
}

}  // namespace
}  // namespace colo
