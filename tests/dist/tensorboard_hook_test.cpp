// TensorBoardHook on 2, 4 and 8 ranks: the event files it writes, read back with the `tensorboard`
// package (tests/oracle/read_tensorboard.py, a test oracle like timm), hold every record's scalars
// at the record's step with its value and a wall time of the run; rank 0 writes alone unless every
// rank is asked to, each then a run of its own; a directory that cannot be used is refused naming it.
#include <colo/booster/booster.h>
#include <colo/trainer/tensorboard_hook.h>
#include <colo/trainer/trainer.h>
#include <colo/trainer/trainer_hooks.h>
#include <colo/data/data_loader.h>
#include <colo/data/synthetic_dataset.h>
#include <colo/dist/process_group.h>
#include <colo/files/files.h>
#include <colo/optim/cosine_annealing_warmup_lr.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <limits.h>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "dist_test_env.h"
#include "plugin_equivalence.h"

namespace colo::test {
namespace {

double tb_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Every record the hooks report, on this rank.
class TbRecords : public TrainerHook {
 public:
  void report(Trainer&, const Record& record) override { records.push_back(record); }
  std::vector<Record> records;
};

// A short torch_ddp run of a tiny ViT (5 steps, a record every 2 and evaluations) with the metric
// hooks, `extra` and a TbRecords; its records, and the wall-clock interval it ran in.
struct TbRun {
  std::vector<Record> records;
  double started = 0, ended = 0;
};

TbRun tb_fit(const std::shared_ptr<TrainerHook>& extra) {
  TbRun out;
  auto plugin = make_plugin("torch_ddp", {}, world());
  Booster booster(plugin);
  auto model = make_vit(7);
  auto optimizer = conditioned_adamw(*model);
  auto b = booster.boost(model, optimizer, cross_entropy);
  const int64_t dp = world()->size(), rank = world()->rank();
  auto train = std::make_shared<data::SyntheticDataset>(48, data::ImageShape{3, 16, 16}, 10, 5);
  auto test = std::make_shared<data::SyntheticDataset>(20, data::ImageShape{3, 16, 16}, 10, 6);
  data::DataLoader train_loader(
      train, data::DataLoaderOptions(2).shuffle(true).drop_last(true).seed(9).num_replicas(dp).rank(rank).device(device()));
  data::DataLoader test_loader(test, data::DataLoaderOptions(8).num_replicas(dp).rank(rank).device(device()));
  b.lr_scheduler = std::make_shared<optim::CosineAnnealingWarmupLR>(b.optimizer->optimizer(), 100, 2);
  auto records = std::make_shared<TbRecords>();
  Trainer trainer(booster, b, TrainerOptions().log_every(2).max_steps(5).progress(false));
  out.started = tb_now();
  trainer.fit(train_loader, 3, &test_loader, 1,
              {extra, std::make_shared<LRSchedulerHook>(), std::make_shared<LossHook>(),
               std::make_shared<AccuracyHook>(),
               std::make_shared<ThroughputHook>(ThroughputOptions().flops_per_image(1e6).peak_flops_per_device(1e9)),
               records});
  out.ended = tb_now();
  out.records = records->records;
  return out;
}

// What TensorBoard reads from `dir`: {"runs": {run: {"files", "first_events", "scalars"}}}.
nlohmann::json tb_read_back(const std::string& dir) {
  const std::string command =
      std::string(COLO_PYTHON " " COLO_SOURCE_DIR "/tests/oracle/read_tensorboard.py '") + dir + "' 2>&1";
  std::string output;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "cannot run " << command;
    return nlohmann::json::object();
  }
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0;) output.append(buffer, n);
  const int status = ::pclose(pipe);
  if (status != 0) {
    ADD_FAILURE() << command << " failed (the `tensorboard` Python package is a test oracle: cmake/run.sh's "
                  << "oracle_pins installs it):\n"
                  << output;
    return nlohmann::json::object();
  }
  return nlohmann::json::parse(output);
}

std::string tb_host() {
  char name[HOST_NAME_MAX + 1] = {};
  ::gethostname(name, sizeof(name) - 1);
  return name;
}

// One run as TensorBoard reads it against the records this rank reported: one event file named
// as TensorBoard names them (with `suffix`), first the format's version, then one event per
// record, each numeric field but the step a scalar "<event>/<field>" at the record's step with the
// field's value in float32, stamped within the run (the version when the hook was made).
void tb_expect_run_holds(const nlohmann::json& run, const TbRun& fit, const std::string& suffix, double created_after) {
  ASSERT_EQ(run.at("files").size(), 1u) << run.dump();
  const std::string file = run.at("files")[0];
  const std::regex name("events\\.out\\.tfevents\\.\\d{10}\\." + tb_host() + "\\." + std::to_string(::getpid()) +
                        "\\.0" + std::regex_replace(suffix, std::regex("\\."), "\\."));
  EXPECT_TRUE(std::regex_match(file, name)) << file;
  const auto& first = run.at("first_events")[0];
  EXPECT_EQ(first.at("file_version"), "brain.Event:2");
  EXPECT_EQ(first.at("step"), 0);
  EXPECT_GE(first.at("wall_time").get<double>(), created_after);
  EXPECT_LE(first.at("wall_time").get<double>(), fit.started);
  EXPECT_EQ(first.at("events").get<size_t>(), 1 + fit.records.size());

  std::map<std::string, std::vector<std::pair<int64_t, float>>> expected;
  for (const auto& record : fit.records) {
    for (const auto& [key, value] : record.values()) {
      if (key == "step" || std::holds_alternative<std::string>(value) || std::isnan(record.number(key))) continue;
      expected[record.text_of("event") + "/" + key].emplace_back(static_cast<int64_t>(record.number("step")),
                                                                static_cast<float>(record.number(key)));
    }
  }
  // What the issue asks TensorBoard to show is among them.
  for (const char* tag : {"train/loss", "train/lr", "train/images_per_s", "train/mfu", "eval/loss", "eval/top1"}) {
    EXPECT_TRUE(expected.count(tag)) << tag;
  }
  std::set<std::string> tags_read, tags_expected;
  for (const auto& [tag, points] : run.at("scalars").items()) tags_read.insert(tag);
  for (const auto& [tag, points] : expected) tags_expected.insert(tag);
  EXPECT_EQ(tags_read, tags_expected);
  for (const auto& [tag, points] : expected) {
    if (!run.at("scalars").contains(tag)) continue;
    const auto& read = run.at("scalars").at(tag);
    ASSERT_EQ(read.size(), points.size()) << tag;
    double previous = 0;
    for (size_t i = 0; i < points.size(); ++i) {
      const double wall_time = read[i][0], value = read[i][2];
      EXPECT_EQ(read[i][1].get<int64_t>(), points[i].first) << tag << " #" << i;
      EXPECT_EQ(static_cast<float>(value), points[i].second) << tag << " at step " << points[i].first;
      EXPECT_GE(wall_time, fit.started) << tag;
      EXPECT_LE(wall_time, fit.ended) << tag;
      EXPECT_GE(wall_time, previous) << tag;
      previous = wall_time;
    }
  }
}

TEST(TensorBoardHook, RankZeroWritesEveryRecordAsScalarsThatTensorBoardReadsBack) {
  if (!TensorBoardHook::available()) GTEST_SKIP() << "built without protobuf: no TensorBoard files";
  const auto dir = shared_directory("tensorboard_rank0");
  const double created_after = tb_now();
  auto hook = std::make_shared<TensorBoardHook>(dir, TensorBoardOptions().rank(world()->rank()));
  EXPECT_EQ(hook->path().empty(), world()->rank() != 0);
  const TbRun fit = tb_fit(hook);
  hook.reset();
  world()->barrier().wait();
  if (world()->rank() == 0) {
    const auto read = tb_read_back(dir);
    ASSERT_TRUE(read.contains("runs"));
    // One run, the directory itself: the other ranks wrote nothing.
    ASSERT_EQ(read.at("runs").size(), 1u) << read.dump();
    ASSERT_TRUE(read.at("runs").contains(".")) << read.dump();
    tb_expect_run_holds(read.at("runs").at("."), fit, "", created_after);
    EXPECT_EQ(files::list_directory(dir).size(), 1u);
  }
  remove_shared_directory(dir);
}

TEST(TensorBoardHook, EveryRankWritesItsOwnRunWhenAsked) {
  if (!TensorBoardHook::available()) GTEST_SKIP() << "built without protobuf: no TensorBoard files";
  const auto dir = shared_directory("tensorboard_every_rank");
  const int rank = world()->rank();
  const double created_after = tb_now();
  auto hook = std::make_shared<TensorBoardHook>(dir, TensorBoardOptions().rank(rank).every_rank(true));
  EXPECT_EQ(files::parent_path(hook->path()), files::join(dir, "rank" + std::to_string(rank)));
  const TbRun fit = tb_fit(hook);
  hook.reset();
  world()->barrier().wait();
  const auto read = tb_read_back(dir);
  ASSERT_TRUE(read.contains("runs"));
  std::set<std::string> runs, expected_runs;
  for (const auto& [run, contents] : read.at("runs").items()) runs.insert(run);
  for (int r = 0; r < world()->size(); ++r) expected_runs.insert("rank" + std::to_string(r));
  EXPECT_EQ(runs, expected_runs);
  const std::string mine = "rank" + std::to_string(rank);
  if (read.at("runs").contains(mine)) tb_expect_run_holds(read.at("runs").at(mine), fit, "." + mine, created_after);
  remove_shared_directory(dir);
}

TEST(TensorBoardHook, ADirectoryThatCannotBeUsedIsRefusedNamingIt) {
  if (!TensorBoardHook::available()) GTEST_SKIP() << "built without protobuf: no TensorBoard files";
  const auto dir = shared_directory("tensorboard_unusable");
  const std::string file = files::join(dir, "a_file");
  if (world()->rank() == 0) std::ofstream(file) << "not a directory";
  world()->barrier().wait();
  // A file where the directory should be, and a directory under a file; every rank that writes says so.
  for (const auto& bad : {file, files::join(file, "logs")}) {
    try {
      TensorBoardHook hook(bad, TensorBoardOptions().rank(world()->rank()).every_rank(true));
      ADD_FAILURE() << "TensorBoardHook accepted " << bad;
    } catch (const TensorBoardError& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
  // Rank 0 alone writes by default: the other ranks do not look at the directory at all.
  if (world()->rank() != 0) {
    EXPECT_NO_THROW(TensorBoardHook(file, TensorBoardOptions().rank(world()->rank())));
  }
  std::ifstream in(file);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "not a directory");
  remove_shared_directory(dir);
}

TEST(TensorBoardHook, ALaterRunAddsAFileAndLeavesTheEarlierOnes) {
  if (!TensorBoardHook::available()) GTEST_SKIP() << "built without protobuf: no TensorBoard files";
  if (world()->rank() == 0) {
    const files::TemporaryDirectory dir("colo_tensorboard_");
    const TensorBoardHook first(dir.path(), {});
    const TensorBoardHook second(dir.path(), {});
    // The same second, host and process: the next free number names the second file.
    EXPECT_NE(first.path(), second.path());
    EXPECT_EQ(files::list_directory(dir.path()).size(), 2u);
    const auto read = tb_read_back(dir.path());
    ASSERT_TRUE(read.contains("runs"));
    EXPECT_EQ(read.at("runs").at(".").at("first_events").size(), 2u);
  }
  world()->barrier().wait();
}

TEST(TensorBoardHook, BuiltForAnotherRankIsRefusedAtTheStart) {
  if (!TensorBoardHook::available()) GTEST_SKIP() << "built without protobuf: no TensorBoard files";
  const auto dir = shared_directory("tensorboard_wrong_rank");
  // Every rank claims to be the next one: each is told at before_fit, before any step.
  const int claimed = (world()->rank() + 1) % world()->size();
  try {
    tb_fit(std::make_shared<TensorBoardHook>(dir, TensorBoardOptions().rank(claimed)));
    ADD_FAILURE() << "a hook built for rank " << claimed << " ran on rank " << world()->rank();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("built for rank " + std::to_string(claimed)), std::string::npos) << e.what();
  }
  remove_shared_directory(dir);
}

}  // namespace
}  // namespace colo::test
