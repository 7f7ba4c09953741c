// train_vit's saved states against a hostile user, as a black box: --save into another run's
// directory (refused, or --overwrite), two runs in one directory (the second is refused at
// start-up, naming the first), an unusable --save target (found before training), --init with
// --resume (refused; the resumed run keeps its init's normalisation), and what an image folder's
// links and a malformed preprocessor_config.json beside --init do. Every run is one process on
// tiny data.
#include <colo/data/image_codec.h>
#include <colo/files/files.h>
#include <colo/checkpoint/safetensors.h>
#include <colo/nn/vision_transformer.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "command_output.h"

namespace {

using command_output::read_file;
using command_output::quote;

namespace files = colo::files;

const std::string kTrainVit = COLO_BINARY_DIR "/bin/train_vit";

struct Result {
  int exit_code = -1;
  std::string out;
  std::string err;
};

class TrainVitState : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!files::exists(kTrainVit)) GTEST_SKIP() << kTrainVit << " is not built (COLO_BUILD_EXAMPLES=OFF?)";
    dir_ = files::make_temp_directory("train_vit_state_");
  }
  void TearDown() override {
    if (!dir_.empty()) files::remove_all(dir_);
  }

  // train_vit as a job of one, its output captured; with `background`, started and left running
  // (its pid returned as the exit code).
  Result run(const std::vector<std::string>& args, bool background = false) const {
    std::string command =
        "env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE -u COLO_RDZV_FILE " + quote(kTrainVit);
    for (const auto& arg : args) command += " " + quote(arg);
    const std::string out = path(background ? "background.out" : "stdout.txt");
    const std::string err = path(background ? "background.err" : "stderr.txt");
    command += " >" + quote(out) + " 2>" + quote(err);
    Result result;
    if (background) {
      const std::string pid_file = path("background.pid");
      // $! is train_vit's own pid: the shell forks for the job, env and train_vit replace the child.
      const int status = std::system((command + " & echo $! >" + quote(pid_file)).c_str());
      result.exit_code = status == 0 ? std::atoi(read_file(pid_file).c_str()) : -1;
      return result;
    }
    const int status = std::system(command.c_str());
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    result.out = read_file(out);
    result.err = read_file(err);
    return result;
  }

  std::string path(const std::string& name) const { return files::join(dir_, name); }

  // A tiny job: a 16x16 synthetic data set and a two-block ViT, seconds to train.
  static std::vector<std::string> tiny(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {
        "--dataset",    "synthetic", "--synthetic-samples", "96", "--image-size", "16", "--model",           "custom",
        "--patch-size", "8",         "--embed-dim",         "16", "--depth",      "2",  "--heads",           "2",
        "--batch-size", "16",        "--threads",           "1",  "--log-every",  "1",  "--eval-batch-size", "32"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }

  std::vector<std::string> states(const std::string& root) const {
    std::vector<std::string> out;
    for (const auto& name : files::list_directory(root)) {
      if (name.rfind("step-", 0) == 0) out.push_back(name);
    }
    return out;
  }

  std::string dir_;
};

TEST_F(TrainVitState, ANewRunRefusesADirectoryHoldingAnotherRunsStateAndDeletesNothing) {
  const std::string ckpt = path("ckpt");
  ASSERT_EQ(run(tiny({"--max-steps", "2", "--save", ckpt})).exit_code, 0);
  const std::string saved = read_file(files::join(ckpt, "step-00000002", "training_state.json"));
  const Result second = run(tiny({"--max-steps", "4", "--seed", "7", "--save", ckpt}));
  EXPECT_EQ(second.exit_code, 2) << second.out << second.err;
  EXPECT_CONTAINS(second.err, "--save " + ckpt + ": holds the saved state of another run (step-00000002)");
  EXPECT_CONTAINS(second.err, "Continue that run (--resume " + ckpt + "), save into another directory, or replace its "
                              "states (--overwrite)");
  EXPECT_LACKS(second.out, "train_vit: plugin");  // refused at start-up
  EXPECT_EQ(states(ckpt), (std::vector<std::string>{"step-00000002"}));
  EXPECT_EQ(read_file(files::join(ckpt, "step-00000002", "training_state.json")), saved);
}

TEST_F(TrainVitState, OverwriteReplacesTheOldStateOnceItsOwnIsSaved) {
  const std::string ckpt = path("ckpt");
  ASSERT_EQ(run(tiny({"--max-steps", "2", "--save", ckpt})).exit_code, 0);
  const Result second = run(tiny({"--max-steps", "4", "--seed", "7", "--save", ckpt, "--overwrite"}));
  ASSERT_EQ(second.exit_code, 0) << second.out << second.err;
  EXPECT_EQ(states(ckpt), (std::vector<std::string>{"step-00000004"}));
  const Result alone = run(tiny({"--overwrite"}));
  EXPECT_EQ(alone.exit_code, 2);
  EXPECT_CONTAINS(alone.err, "--overwrite says what --save may replace: give --save DIR");
}

TEST_F(TrainVitState, AResumedRunRemovesTheStateItResumedFromAndNoOther) {
  const std::string ckpt = path("ckpt");
  ASSERT_EQ(run(tiny({"--max-steps", "2", "--save", ckpt})).exit_code, 0);
  files::create_directories(files::join(ckpt, "step-00000001"));  // someone's, left beside
  std::ofstream(files::join(ckpt, "step-00000001", "training_state.json")) << "{}";
  const Result resumed = run(tiny({"--max-steps", "4", "--resume", ckpt, "--save", ckpt}));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out << resumed.err;
  EXPECT_EQ(states(ckpt), (std::vector<std::string>{"step-00000001", "step-00000004"}));
}

// The first run holds DIR's lock for its life; the second is refused at start-up with the first's
// pid, host and command line; once the first is killed (SIGKILL: no clean-up of its own), the
// kernel has released the lock and a third run may take the directory over.
TEST_F(TrainVitState, ASecondRunIsRefusedAtStartUpNamingTheFirstAndAKilledRunReleasesTheDirectory) {
  const std::string ckpt = path("ckpt");
  const int first = run(tiny({"--epochs", "100000", "--save", ckpt}), /*background=*/true).exit_code;
  ASSERT_GT(first, 0);
  const std::string lock = files::join(ckpt, ".lock");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (read_file(lock).find("train_vit") == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const Result second = run(tiny({"--max-steps", "1", "--save", ckpt}));
  ::kill(first, SIGKILL);
  // Not this process's child: it is gone when /proc no longer lists it, or lists it as a zombie.
  auto alive = [&] {
    const std::string stat = read_file("/proc/" + std::to_string(first) + "/stat");
    const auto state = stat.find(") ");
    return state != std::string::npos && stat.compare(state + 2, 1, "Z") != 0;
  };
  while (alive() && std::chrono::steady_clock::now() < deadline + std::chrono::seconds(10)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(second.exit_code, 2) << second.out << second.err << read_file(path("background.err"));
  EXPECT_CONTAINS(second.err, "--save " + ckpt + ": another run is saving into this directory (pid " +
                                  std::to_string(first) + " on host ");
  EXPECT_CONTAINS(second.err, "train_vit --dataset synthetic");
  EXPECT_CONTAINS(second.err, "wait for that run to end, or save into another directory");
  EXPECT_LACKS(second.out, "train_vit: plugin");
  const Result third = run(tiny({"--max-steps", "1", "--save", ckpt, "--overwrite"}));
  EXPECT_EQ(third.exit_code, 0) << third.out << third.err;
}

TEST_F(TrainVitState, AnUnusableSaveTargetIsAUsageErrorBeforeTraining) {
  std::ofstream(path("file")) << "in the way";
  std::vector<std::pair<std::string, std::string>> cases = {
      {path("file"), ": a file is in the way"},
      {files::join(path("file"), "ckpt"), ": cannot create the directory"},
  };
  // Not writable even by root (the tests run as root here, where permission bits deny nothing).
  if (files::is_directory("/sys/kernel")) cases.emplace_back("/sys/kernel", ": cannot write into this directory");
  for (const auto& [target, fault] : cases) {
    const Result r = run(tiny({"--max-steps", "1", "--save", target}));
    EXPECT_EQ(r.exit_code, 2) << target << "\n" << r.out << r.err;
    EXPECT_CONTAINS(r.err, "--save " + target + fault);
    EXPECT_LACKS(r.out, "train_vit: plugin");
  }
  if (::geteuid() != 0) {
    files::create_directories(path("read_only"));
    ::chmod(path("read_only").c_str(), 0555);
    const Result r = run(tiny({"--max-steps", "1", "--save", path("read_only")}));
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_CONTAINS(r.err, "Permission denied");
  }
}

// ---------------------------------------------------------------------------------------------
// --init, its normalisation, and image folders

// Weights of the tiny custom ViT on 2 classes, with `preprocessor` as their preprocessor_config.json.
std::string write_weights(const std::string& dir, const std::string& preprocessor) {
  torch::manual_seed(3);
  auto model = colo::nn::make_vision_transformer(
      colo::nn::ViTConfig().image_size(16).patch_size(8).embed_dim(16).depth(2).num_heads(2).num_classes(2));
  colo::checkpoint::NamedTensors state;
  for (const auto& item : model->canonical_named_parameters()) state.emplace_back(item.key(), item.value().detach());
  for (const auto& item : model->canonical_named_buffers()) state.emplace_back(item.key(), item.value().detach());
  files::create_directories(dir);
  colo::checkpoint::write_safetensors(files::join(dir, "model.safetensors"), state);
  std::ofstream(files::join(dir, "preprocessor_config.json")) << preprocessor;
  return dir;
}

// DIR/train and DIR/val, classes ant and bee, 4 and 2 small PNGs each.
std::string write_image_folder(const std::string& root) {
  std::vector<uint8_t> rgb(20 * 20 * 3);
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>(31 * i);
  for (const auto& [split, count] : {std::make_pair("train", 4), std::make_pair("val", 2)}) {
    for (const char* name : {"ant", "bee"}) {
      files::create_directories(files::join(root, split, name));
      for (int k = 0; k < count; ++k) {
        colo::data::write_png(files::join(root, split, name, std::to_string(k) + ".png"), rgb.data(), 20, 20);
      }
    }
  }
  return root;
}

std::vector<std::string> on_folder(const std::string& data, std::vector<std::string> extra) {
  std::vector<std::string> args = {"--dataset", "imagefolder", "--data-dir", data,   "--model",   "custom",
                                   "--image-size", "16",       "--patch-size", "8",  "--embed-dim", "16",
                                   "--depth",  "2",            "--heads",  "2",      "--batch-size", "4",
                                   "--eval-batch-size", "4",   "--threads", "1",     "--workers", "1"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

TEST_F(TrainVitState, InitWithResumeIsRefused) {
  const Result r = run(tiny({"--init", path("weights"), "--resume", path("ckpt")}));
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_CONTAINS(r.err, "--init " + path("weights") + " with --resume " + path("ckpt") +
                             ": a resumed run takes its weights from the saved state");
  EXPECT_CONTAINS(r.err, "drop --init");
}

TEST_F(TrainVitState, AResumedFineTuneKeepsTheNormalisationOfItsInit) {
  const std::string data = write_image_folder(path("photos"));
  const std::string weights =
      write_weights(path("weights"), R"({"image_mean": [0.5, 0.5, 0.5], "image_std": [0.25, 0.25, 0.25]})");
  const std::string ckpt = path("ckpt");
  const std::string normalised = "normalised with mean (0.5, 0.5, 0.5) std (0.25, 0.25, 0.25) (the pretrained weights')";
  const Result first = run(on_folder(data, {"--init", weights, "--max-steps", "1", "--save", ckpt}));
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  EXPECT_CONTAINS(first.out, normalised);
  const Result resumed = run(on_folder(data, {"--max-steps", "2", "--resume", ckpt, "--save", ckpt}));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out << resumed.err;
  EXPECT_CONTAINS(resumed.out, normalised);
  EXPECT_LACKS(resumed.out, "note: resuming with init");
}

TEST_F(TrainVitState, AMalformedPreprocessorConfigBesideInitIsAnErrorNamingIt) {
  const std::string data = write_image_folder(path("photos"));
  const std::string weights = write_weights(path("weights"), R"({"image_mean": [0.5, 0.5], "image_std": [0.5, 0.5]})");
  const Result r = run(on_folder(data, {"--init", weights, "--max-steps", "1"}));
  EXPECT_NE(r.exit_code, 0) << r.out << r.err;
  EXPECT_CONTAINS(r.err, files::join(weights, "preprocessor_config.json") + ": image_mean is [0.5,0.5]: expected 3 "
                                                                          "numbers");
  EXPECT_LACKS(r.out, "train_vit: plugin");
}

TEST_F(TrainVitState, ALinkCycleInAnImageFolderIsFollowedOnceAndSaid) {
  const std::string data = write_image_folder(path("photos"));
  ASSERT_EQ(::symlink("..", files::join(data, "train", "ant", "up").c_str()), 0);
  const Result r = run(on_folder(data, {"--max-steps", "1"}));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_CONTAINS(r.out, "data: imagefolder, 8 training / 4 test images");
  EXPECT_CONTAINS(r.out, "data: " + files::join(data, "train", "ant", "up") + " (a link to ..): leads back to " +
                             files::join(data, "train"));
}

}  // namespace
