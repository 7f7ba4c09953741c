// train_vit --tensorboard, run as a black box: the event files it writes, read back with the
// `tensorboard` Python package (tests/oracle/read_tensorboard.py, a test oracle), hold the numbers
// its --metrics file holds; rank 0 writes alone unless --tensorboard-all-ranks; a directory that
// cannot be used stops the run at the start naming it.
#include <colo/files/files.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace files = colo::files;

struct Outcome {
  int exit_code = -1;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string shell_quote(const std::string& arg) {
  std::string quoted = "'";
  for (char c : arg) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

class TrainVitTensorBoard : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!files::exists(COLO_BINARY_DIR "/bin/train_vit")) GTEST_SKIP() << "train_vit is not built";
    dir_ = files::make_temp_directory("train_vit_tensorboard_");
  }
  void TearDown() override {
    if (!dir_.empty()) files::remove_all(dir_);
  }

  // train_vit on `ranks` ranks (colo-run with a rendezvous file; 1: the program alone) on a tiny
  // synthetic job of 6 steps, one epoch, a record per step, with `extra` arguments.
  Outcome train(int ranks, const std::vector<std::string>& extra) const {
    std::string command = "env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE -u COLO_RDZV_FILE ";
    if (ranks > 1) {
      command += shell_quote(COLO_BINARY_DIR "/bin/colo-run") + " --nproc-per-node " + std::to_string(ranks) +
                 " --rdzv-file auto ";
    }
    command += shell_quote(COLO_BINARY_DIR "/bin/train_vit");
    for (const auto& arg : {"--dataset", "synthetic", "--synthetic-samples", "96", "--image-size", "16", "--model",
                            "custom", "--patch-size", "8", "--embed-dim", "16", "--depth", "2", "--heads", "2",
                            "--batch-size", "16", "--threads", "1", "--log-every", "1", "--eval-batch-size", "32",
                            "--epochs", "1"}) {
      command += " " + shell_quote(arg);
    }
    for (const auto& arg : extra) command += " " + shell_quote(arg);
    const std::string out = files::join(dir_, "stdout.txt"), err = files::join(dir_, "stderr.txt");
    command += " >" + shell_quote(out) + " 2>" + shell_quote(err);
    const int status = std::system(command.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
  }

  // What TensorBoard reads from `logdir` ({"runs": {run: {"files", "first_events", "scalars"}}}).
  static nlohmann::json read_back(const std::string& logdir) {
    const std::string command =
        COLO_PYTHON " " + shell_quote(COLO_SOURCE_DIR "/tests/oracle/read_tensorboard.py") + " " + shell_quote(logdir);
    std::string output;
    FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
    if (pipe == nullptr) return nlohmann::json::object();
    char buffer[4096];
    for (size_t n; (n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0;) output.append(buffer, n);
    if (::pclose(pipe) != 0) {
      ADD_FAILURE() << command << " failed (the `tensorboard` package is a test oracle: cmake/run.sh's oracle_pins "
                    << "installs it):\n" << output;
      return nlohmann::json::object();
    }
    return nlohmann::json::parse(output);
  }

  // step -> field of the --metrics file's records of `event`.
  static std::map<int64_t, double> metric(const std::string& path, const std::string& event, const std::string& field) {
    std::map<int64_t, double> values;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      const auto record = nlohmann::json::parse(line);
      if (record.at("event") == event && record.contains(field) && record.at(field).is_number()) {
        values[record.at("step").get<int64_t>()] = record.at(field).get<double>();
      }
    }
    return values;
  }

  // step -> value of `tag` in a run as TensorBoard read it.
  static std::map<int64_t, double> scalars(const nlohmann::json& run, const std::string& tag) {
    std::map<int64_t, double> values;
    if (!run.at("scalars").contains(tag)) return values;
    for (const auto& point : run.at("scalars").at(tag)) values[point[1].get<int64_t>()] = point[2].get<double>();
    return values;
  }

  // The run holds what the metrics file holds, as float32.
  static void expect_matches_metrics(const nlohmann::json& run, const std::string& metrics) {
    for (const auto& [event, field] : std::vector<std::pair<std::string, std::string>>{
             {"train", "loss"}, {"train", "lr"}, {"eval", "top1"}, {"eval", "loss"}}) {
      const auto want = metric(metrics, event, field);
      const auto got = scalars(run, event + "/" + field);
      ASSERT_FALSE(want.empty()) << event << "/" << field;
      ASSERT_EQ(got.size(), want.size()) << event << "/" << field;
      for (const auto& [step, value] : want) {
        EXPECT_EQ(static_cast<float>(got.at(step)), static_cast<float>(value)) << event << "/" << field << " step " << step;
      }
    }
    EXPECT_EQ(scalars(run, "train/images_per_s").size(), 6u);
  }

  std::string dir_;
};

TEST_F(TrainVitTensorBoard, RankZeroWritesTheScalarsOfItsMetrics) {
  const std::string logdir = files::join(dir_, "tb"), metrics = files::join(dir_, "m.jsonl");
  const Outcome r = train(2, {"--tensorboard", logdir, "--metrics", metrics});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("tensorboard: " + logdir + "/events.out.tfevents."), std::string::npos) << r.out;
  const auto read = read_back(logdir);
  ASSERT_TRUE(read.contains("runs")) << read.dump();
  ASSERT_EQ(read.at("runs").size(), 1u) << read.dump();  // rank 1 wrote nothing
  const auto& run = read.at("runs").at(".");
  EXPECT_EQ(run.at("files").size(), 1u);
  EXPECT_EQ(run.at("first_events")[0].at("file_version"), "brain.Event:2");
  expect_matches_metrics(run, metrics);
}

TEST_F(TrainVitTensorBoard, AllRanksWriteARunEach) {
  const std::string logdir = files::join(dir_, "tb"), metrics = files::join(dir_, "m.jsonl");
  const Outcome r = train(2, {"--tensorboard", logdir, "--tensorboard-all-ranks", "--metrics", metrics});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto read = read_back(logdir);
  ASSERT_TRUE(read.contains("runs")) << read.dump();
  std::set<std::string> runs;
  for (const auto& [name, run] : read.at("runs").items()) runs.insert(name);
  EXPECT_EQ(runs, (std::set<std::string>{"rank0", "rank1"}));
  // The loss and accuracy are the world's: both ranks log the metrics file's numbers.
  for (const auto& name : runs) expect_matches_metrics(read.at("runs").at(name), metrics);
}

TEST_F(TrainVitTensorBoard, ADirectoryThatIsAFileStopsTheRunAtTheStart) {
  const std::string file = files::join(dir_, "taken");
  std::ofstream(file) << "a file";
  const Outcome r = train(1, {"--tensorboard", file});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("--tensorboard"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(file + ": this is a file, not a directory"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("epoch 1/1"), std::string::npos) << "it trained:\n" << r.out;
  EXPECT_EQ(slurp(file), "a file");
}

TEST_F(TrainVitTensorBoard, AllRanksWithoutADirectoryIsAUsageError) {
  const Outcome r = train(1, {"--tensorboard-all-ranks"});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("give --tensorboard DIR"), std::string::npos) << r.err;
  const Outcome empty = train(1, {"--tensorboard", ""});
  EXPECT_EQ(empty.exit_code, 2) << empty.out << empty.err;
  EXPECT_NE(empty.err.find("--tensorboard: the directory name is empty"), std::string::npos) << empty.err;
}

}  // namespace
