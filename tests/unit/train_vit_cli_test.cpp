// Tests of the train_vit example, run as a black box: the exit status, the error messages a
// user sees, the last line it prints, and that --save / --resume continue a run exactly.
// Every run is one process (a world of one) on tiny synthetic data.
#include <colo/files/files.h>
#include <colo/data/image_codec.h>
#include <colo/data/image_folder.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fmt/format.h>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "damage_safetensors.h"
#include "command_output.h"
#include "metrics_records.h"

namespace {

using command_output::read_file;
using command_output::quote;

namespace files = colo::files;

const std::string kTrainVit = COLO_BINARY_DIR "/bin/train_vit";
const std::string kColoRun = COLO_BINARY_DIR "/bin/colo-run";

struct Result {
  int exit_code = -1;
  std::string out;
  std::string err;
};

class TrainVitCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!files::exists(kTrainVit)) GTEST_SKIP() << kTrainVit << " is not built (COLO_BUILD_EXAMPLES=OFF?)";
    dir_ = files::join(files::temp_directory(), "train_vit_cli_" + std::to_string(::getpid()) + "_" +
                                                    ::testing::UnitTest::GetInstance()->current_test_info()->name());
    files::remove_all(dir_);
    files::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) files::remove_all(dir_);
  }

  // Runs train_vit as a job of one (no launcher variables), one thread, with `args`.
  Result run(const std::vector<std::string>& args) const {
    std::string command =
        "env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE -u COLO_RDZV_FILE " + quote(kTrainVit);
    for (const auto& arg : args) command += " " + quote(arg);
    return run_shell(command);
  }

  // Runs a shell command line, its stdout and stderr captured.
  Result run_shell(std::string command) const {
    const std::string out = files::join(dir_, "stdout.txt");
    const std::string err = files::join(dir_, "stderr.txt");
    command += " >" + quote(out) + " 2>" + quote(err);
    const int status = std::system(command.c_str());
    Result result;
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    result.out = read_file(out);
    result.err = read_file(err);
    return result;
  }

  // The same under colo-run with `ranks` ranks (a rendezvous file, no ports).
  Result run_on(int ranks, const std::vector<std::string>& args) const {
    std::vector<std::string> launched = {"--nproc-per-node", std::to_string(ranks), "--rdzv-file", "auto", kTrainVit};
    launched.insert(launched.end(), args.begin(), args.end());
    std::string command = "env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE -u COLO_RDZV_FILE " +
                          quote(COLO_BINARY_DIR "/bin/colo-run");
    for (const auto& arg : launched) command += " " + quote(arg);
    const std::string out = files::join(dir_, "stdout.txt");
    const std::string err = files::join(dir_, "stderr.txt");
    command += " >" + quote(out) + " 2>" + quote(err);
    const int status = std::system(command.c_str());
    Result result;
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    result.out = read_file(out);
    result.err = read_file(err);
    return result;
  }

  // A tiny job: a 16x16 synthetic data set and a two-block ViT, seconds to train.
  static std::vector<std::string> tiny(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {
        "--dataset",    "synthetic", "--synthetic-samples", "96", "--image-size", "16", "--model",           "custom",
        "--patch-size", "8",         "--embed-dim",         "16", "--depth",      "2",  "--heads",           "2",
        "--batch-size", "16",        "--threads",           "1",  "--log-every",  "1",  "--eval-batch-size", "32"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }

  // step -> loss of the "train" records of a --metrics file.
  static std::map<int64_t, double> losses(const std::string& metrics) {
    return metrics_records::train_field(metrics, "loss");
  }

  static std::string last_line(const std::string& text) {
    std::string trimmed = text;
    while (!trimmed.empty() && trimmed.back() == '\n') trimmed.pop_back();
    return trimmed.substr(trimmed.rfind('\n') == std::string::npos ? 0 : trimmed.rfind('\n') + 1);
  }

  std::string dir_;
};

TEST_F(TrainVitCli, HelpListsTheOptionsAndExitsZero) {
  const Result r = run({"--help"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const char* option : {"--plugin", "--plugin-opt", "--batch-size", "--grad-accum", "--warmup", "--resume",
                             "--metrics", "--max-steps", "--threads", "--max-nonfinite-steps",
                             "--early-stop"}) {
    EXPECT_NE(r.out.find(option), std::string::npos) << option << " missing from --help";
  }
}

TEST_F(TrainVitCli, UnknownOptionIsAUsageErrorWithASuggestion) {
  const Result r = run({"--epoch", "3", "--bogus"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown option '--epoch'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("did you mean --epochs?"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("unknown option '--bogus'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("train_vit --help"), std::string::npos) << r.err;
}

TEST_F(TrainVitCli, EveryInvalidValueIsReportedAtOnce) {
  const Result r =
      run({"--batch-size", "0", "--precision", "fp4", "--optimizer", "adam", "--lr=-1", "--plugin-opt", "novalue",
           "--max-nonfinite-steps=-1", "--early-stop=-2"});
  EXPECT_EQ(r.exit_code, 2);
  for (const char* part : {"--batch-size 0", "--precision fp4: not one of fp32, bf16, fp16, fp8",
                           "--optimizer adam: not one of adamw, lamb, sgd", "--lr -1", "--plugin-opt novalue",
                           "--max-nonfinite-steps -1: must be >= 0", "--early-stop -2: must be >= 0"}) {
    EXPECT_NE(r.err.find(part), std::string::npos) << part << " not in: " << r.err;
  }
}

// Under colo-run the first rank to exit stops the job, and it need not be rank 0: rank 1 here
// fails at once on the bad option while rank 0 is slow to start (a sleep). Its reason must reach
// the user; it once was printed by rank 0 only, which colo-run had stopped before it could print.
TEST_F(TrainVitCli, UsageErrorOfTheFirstFailingRankIsPrintedWhateverItsRank) {
  if (!files::exists(kColoRun)) GTEST_SKIP() << kColoRun << " is not built";
  const Result r = run_shell(quote(kColoRun) + " --nproc-per-node 2 --grace-period 1 sh -c " +
                             quote("if [ \"$RANK\" = 0 ]; then exec sleep 30; fi; exec " + quote(kTrainVit) +
                                   " --batch-size 0 --threads 1"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("[rank 1] train_vit: error: --batch-size 0: must be at least 1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("colo-run: rank 1 (pid "), std::string::npos) << r.err;
}

TEST_F(TrainVitCli, MalformedNumberIsAUsageError) {
  const Result r = run({"--epochs", "three"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("epochs"), std::string::npos) << r.err;
}

TEST_F(TrainVitCli, CustomModelNeedsItsShape) {
  const Result r = run({"--model", "custom", "--depth", "2"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--model custom needs --patch-size, --embed-dim, --heads"), std::string::npos) << r.err;
}

TEST_F(TrainVitCli, ConflictingPrecisionsAreRejected) {
  const Result r = run({"--precision", "bf16", "--plugin-opt", "precision=fp16"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--precision bf16 and --plugin-opt precision=fp16 disagree"), std::string::npos) << r.err;
}

TEST_F(TrainVitCli, BatchThatDoesNotSplitIntoMicroBatchesIsRejected) {
  const Result r = run({"--batch-size", "10", "--grad-accum", "4"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--batch-size 10 is not divisible by --grad-accum 4"), std::string::npos) << r.err;
}

TEST_F(TrainVitCli, MissingDatasetNamesTheFileAndHowToGetIt) {
  const Result r = run({"--data-dir", files::join(dir_, "nowhere"), "--threads", "1"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("train-images-idx3-ubyte"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("dataset-fashion-mnist"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--data-dir"), std::string::npos) << r.err;
}

TEST_F(TrainVitCli, UnknownPluginIsAUsageError) {
  const Result r = run(tiny({"--plugin", "no_such_plugin"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no_such_plugin"), std::string::npos) << r.err;
}

TEST_F(TrainVitCli, UnknownPluginOptionIsAUsageErrorListingTheValidKeys) {
  const Result r = run(tiny({"--plugin-opt", "bucket_cap=4"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("bucket_cap"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("bucket_cap_mb"), std::string::npos) << r.err;
}

TEST_F(TrainVitCli, TrainsAndPrintsTheFinalAccuracyLast) {
  const std::string metrics = files::join(dir_, "metrics.jsonl");
  const Result r = run(tiny({"--epochs", "2", "--metrics", metrics}));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::string last = last_line(r.out);
  EXPECT_EQ(last.rfind("final test top-1: ", 0), 0u) << r.out;
  EXPECT_EQ(last.back(), '%') << r.out;

  // 96 images / batch 16 = 6 steps per epoch: 12 train records and one eval per epoch.
  std::ifstream in(metrics);
  int train = 0, eval = 0;
  double last_top1 = -1;
  for (std::string line; std::getline(in, line);) {
    const auto record = nlohmann::json::parse(line);
    if (record.at("event") == "train") ++train;
    if (record.at("event") == "eval") {
      ++eval;
      last_top1 = record.at("top1").get<double>();
      EXPECT_EQ(record.at("images").get<int64_t>(), 96 / 5);
    }
  }
  EXPECT_EQ(train, 12);
  EXPECT_EQ(eval, 2);
  char expected[64];
  std::snprintf(expected, sizeof(expected), "final test top-1: %.2f%%", 100.0 * last_top1);
  EXPECT_EQ(last, expected);
}

// A pipeline of two stages on two ranks trains what one process trains: the same losses step by
// step (to the order of floating-point sums: one whole-batch mean against two microbatch means),
// and it evaluates through the pipeline (forward only) with the same result.
TEST_F(TrainVitCli, TwoStagePipelineTrainsAsOneProcessDoes) {
  const std::string alone = files::join(dir_, "alone.jsonl"), piped = files::join(dir_, "piped.jsonl");
  // Three blocks: 4 stages (2 ranks x 2 chunks) from the patch embedding, the blocks and the head.
  auto deeper = [](std::vector<std::string> extra) {
    auto args = tiny(std::move(extra));
    *(std::find(args.begin(), args.end(), "--depth") + 1) = "3";
    return args;
  };
  const Result one = run(deeper({"--epochs", "2", "--metrics", alone}));
  ASSERT_EQ(one.exit_code, 0) << one.out << one.err;
  const Result two = run_on(2, deeper({"--epochs", "2", "--metrics", piped, "--plugin", "hybrid_parallel", "--plugin-opt",
                                     "pp_size=2", "--plugin-opt", "num_microbatches=2", "--plugin-opt",
                                     "pp_style=interleaved", "--plugin-opt", "num_model_chunks=2"}));
  ASSERT_EQ(two.exit_code, 0) << two.out << two.err;
  EXPECT_NE(two.out.find("(dp=1 pp=2 tp=1)"), std::string::npos) << two.out;
  const auto want = losses(alone), got = losses(piped);
  ASSERT_EQ(want.size(), 12u);  // 96 images / batch 16 = 6 steps per epoch
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [step, loss] : want) EXPECT_NEAR(got.at(step), loss, 1e-5 * loss) << "step " << step;
  // The final accuracy line, printed by rank 0 (prefixed by colo-run).
  EXPECT_NE(two.out.find(last_line(one.out)), std::string::npos) << two.out;
}

// The pipeline is not ViT-only: resnet18 (BatchNorm) cut into two stages trains as one process
// does when that process runs the same two micro-batches in turn (--grad-accum 2: BatchNorm then
// normalises each micro-batch alone, as each pipeline microbatch is).
TEST_F(TrainVitCli, ResNetPipelineTrainsAsOneProcessDoes) {
  const std::string alone = files::join(dir_, "alone.jsonl"), piped = files::join(dir_, "piped.jsonl");
  auto resnet = [](std::vector<std::string> extra) {
    auto args = tiny(std::move(extra));
    *(std::find(args.begin(), args.end(), "--model") + 1) = "resnet18";
    *(std::find(args.begin(), args.end(), "--image-size") + 1) = "32";
    return args;
  };
  const Result one = run(resnet({"--epochs", "1", "--grad-accum", "2", "--metrics", alone}));
  ASSERT_EQ(one.exit_code, 0) << one.out << one.err;
  EXPECT_NE(one.out.find("model: resnet18 image 32"), std::string::npos) << one.out;
  const Result two = run_on(2, resnet({"--epochs", "1", "--metrics", piped, "--plugin", "hybrid_parallel", "--plugin-opt",
                                       "pp_size=2", "--plugin-opt", "num_microbatches=2"}));
  ASSERT_EQ(two.exit_code, 0) << two.out << two.err;
  const auto want = losses(alone), got = losses(piped);
  ASSERT_EQ(want.size(), 6u);
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [step, loss] : want) EXPECT_NEAR(got.at(step), loss, 1e-5 * loss) << "step " << step;
  EXPECT_NE(two.out.find(last_line(one.out)), std::string::npos) << two.out;
}

// Tensor parallelism over two ranks, with sequence parallelism (5 tokens over 2 ranks: padded),
// trains what one process trains, and evaluates alike.
TEST_F(TrainVitCli, TensorParallelTrainsAsOneProcessDoes) {
  const std::string alone = files::join(dir_, "alone.jsonl"), split = files::join(dir_, "split.jsonl");
  const Result one = run(tiny({"--epochs", "2", "--metrics", alone}));
  ASSERT_EQ(one.exit_code, 0) << one.out << one.err;
  const Result two = run_on(2, tiny({"--epochs", "2", "--metrics", split, "--plugin", "hybrid_parallel", "--plugin-opt",
                                     "tp_size=2", "--plugin-opt", "enable_sequence_parallelism=true"}));
  ASSERT_EQ(two.exit_code, 0) << two.out << two.err;
  EXPECT_NE(two.out.find("(dp=1 pp=1 tp=2)"), std::string::npos) << two.out;
  const auto want = losses(alone), got = losses(split);
  ASSERT_EQ(want.size(), 12u);
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [step, loss] : want) EXPECT_NEAR(got.at(step), loss, 1e-5 * loss) << "step " << step;
  EXPECT_NE(two.out.find(last_line(one.out)), std::string::npos) << two.out;
}

// docs/adding_a_model_policy.md's example: a model of one's own with its own shardformer policy,
// registered before boosting, trains under tp_size=2 as it does in one process.
TEST_F(TrainVitCli, AModelPolicyOfOnesOwnTrainsUnderTensorParallelism) {
  const std::string example = COLO_BINARY_DIR "/bin/model_policy";
  if (!files::exists(example)) GTEST_SKIP() << example << " is not built";
  auto run_example = [&](int ranks, const std::string& tp) {
    return run_shell("env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE -u COLO_RDZV_FILE " +
                     quote(kColoRun) + " --nproc-per-node " + std::to_string(ranks) + " --rdzv-file auto " +
                     quote(example) + " " + tp);
  };
  auto step_losses = [](const std::string& out) {
    std::vector<double> found;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) {
      const auto at = line.find(" loss ");
      if (at != std::string::npos) found.push_back(std::stod(line.substr(at + 6)));
    }
    return found;
  };
  const Result one = run_example(1, "1");
  ASSERT_EQ(one.exit_code, 0) << one.out << one.err;
  const Result two = run_example(2, "2");
  ASSERT_EQ(two.exit_code, 0) << two.out << two.err;
  const auto want = step_losses(one.out), got = step_losses(two.out);
  ASSERT_EQ(want.size(), 8u) << one.out;
  ASSERT_EQ(got.size(), want.size()) << two.out;
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * want[i]) << "step " << i;
  EXPECT_LT(want.back(), want.front()) << "the example must learn";
  // A width that does not split (64 hidden units over 3 ranks): the policy's own problem reaches the user.
  const Result three = run_example(3, "3");
  EXPECT_NE(three.exit_code, 0);
  EXPECT_NE((three.out + three.err).find("the hidden width 64 does not divide over tp_size=3"), std::string::npos)
      << three.out << three.err;
}

// Stopping at --max-steps with --save and going on with --resume gives the very losses of an
// uninterrupted run, across an epoch boundary, with gradient accumulation and stochastic depth
// (so the random state must be restored too).
TEST_F(TrainVitCli, ResumeContinuesExactly) {
  const std::vector<std::string> job = {"--epochs", "2", "--grad-accum", "2", "--drop-path", "0.2"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = job;
    args.insert(args.end(), extra.begin(), extra.end());
    return tiny(args);
  };
  const Result whole =
      run(with({"--metrics", files::join(dir_, "whole.jsonl"), "--save", files::join(dir_, "whole_state")}));
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  const Result first = run(with({"--max-steps", "4", "--save", files::join(dir_, "state")}));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_TRUE(files::exists(files::join(dir_, "state", "latest", "training_state.json")));
  const Result second = run(with({"--resume", files::join(dir_, "state"), "--metrics",
                                  files::join(dir_, "resumed.jsonl"), "--save", files::join(dir_, "state")}));
  ASSERT_EQ(second.exit_code, 0) << second.err;
  // The final weights and optimizer state too, byte for byte.
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    const auto want = read_file(files::join(dir_, "whole_state", "latest", file));
    EXPECT_FALSE(want.empty()) << file;
    EXPECT_TRUE(want == read_file(files::join(dir_, "state", "latest", file))) << file << " differs";
  }

  const auto expected = losses(files::join(dir_, "whole.jsonl"));
  const auto resumed = losses(files::join(dir_, "resumed.jsonl"));
  ASSERT_EQ(expected.size(), 12u);  // 6 steps per epoch
  ASSERT_EQ(resumed.size(), 8u);    // steps 5..12
  for (const auto& [step, loss] : resumed) {
    ASSERT_TRUE(expected.count(step)) << "step " << step;
    EXPECT_EQ(loss, expected.at(step)) << "step " << step;
  }
  EXPECT_EQ(last_line(second.out), last_line(whole.out));
}

// Mixup and CutMix per element (--mixup, --cutmix): a run stopped and resumed repeats the
// uninterrupted run's losses exactly (the loader's mixing draws resume with its position), the
// training records carry "top1" (against the mixed targets), and the console says what mixes.
TEST_F(TrainVitCli, MixupResumesExactlyAndReportsTrainingAccuracy) {
  const std::vector<std::string> job = {"--epochs", "2",          "--mixup",           "0.8", "--cutmix",
                                        "1.0",      "--mixup-mode", "elem", "--label-smoothing", "0.1"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = job;
    args.insert(args.end(), extra.begin(), extra.end());
    return tiny(args);
  };
  const Result whole = run(with({"--metrics", files::join(dir_, "whole.jsonl")}));
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  EXPECT_NE(whole.out.find("mixup: alpha 0.8, cutmix alpha 1, prob 1, switch prob 0.5, per elem, label smoothing 0.1"),
            std::string::npos)
      << whole.out;
  const Result first = run(with({"--max-steps", "4", "--save", files::join(dir_, "state")}));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const Result second =
      run(with({"--resume", files::join(dir_, "state"), "--metrics", files::join(dir_, "resumed.jsonl")}));
  ASSERT_EQ(second.exit_code, 0) << second.err;
  const auto expected = losses(files::join(dir_, "whole.jsonl"));
  const auto resumed = losses(files::join(dir_, "resumed.jsonl"));
  ASSERT_EQ(expected.size(), 12u);
  ASSERT_EQ(resumed.size(), 8u);
  for (const auto& [step, loss] : resumed) EXPECT_EQ(loss, expected.at(step)) << "step " << step;

  std::ifstream in(files::join(dir_, "whole.jsonl"));
  int with_top1 = 0;
  for (std::string line; std::getline(in, line);) {
    const auto record = nlohmann::json::parse(line);
    if (record.at("event") != "train") continue;
    ASSERT_TRUE(record.contains("top1")) << line;
    EXPECT_GE(record.at("top1").get<double>(), 0.0);
    EXPECT_LE(record.at("top1").get<double>(), 1.0);
    ++with_top1;
  }
  EXPECT_EQ(with_top1, 12);
  // Mixing changes what is trained on: the first step's loss is not the unmixed run's.
  const Result plain = run(tiny({"--epochs", "2", "--label-smoothing", "0.1", "--max-steps", "1", "--metrics",
                                 files::join(dir_, "plain.jsonl")}));
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_NE(losses(files::join(dir_, "plain.jsonl")).at(1), expected.at(1));
}

// The mixing flags' checks, and their config-file keys (the data section).
TEST_F(TrainVitCli, MixupOptionsFromTheCommandLineAndConfigFiles) {
  std::vector<std::string> odd_batch = tiny({"--mixup", "0.8", "--max-steps", "1"});
  *(std::find(odd_batch.begin(), odd_batch.end(), "--batch-size") + 1) = "15";
  const Result odd = run(odd_batch);
  EXPECT_NE(odd.exit_code, 0);
  EXPECT_NE(odd.err.find("needs an even batch"), std::string::npos) << odd.err;
  const Result bad = run(tiny({"--cutmix-minmax", "0.2", "--mixup-mode", "pairs", "--mixup-prob", "2"}));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--cutmix-minmax 0.2: expected two fractions MIN,MAX"), std::string::npos) << bad.err;
  const Result mode = run(tiny({"--mixup", "0.8", "--mixup-mode", "pairs"}));
  EXPECT_EQ(mode.exit_code, 2);
  EXPECT_NE(mode.err.find("mixup mode 'pairs': not one of batch, pair, elem"), std::string::npos) << mode.err;
  const Result prob = run(tiny({"--mixup", "0.8", "--mixup-prob", "2"}));
  EXPECT_EQ(prob.exit_code, 2);
  EXPECT_NE(prob.err.find("prob 2 must be in [0, 1]"), std::string::npos) << prob.err;

  const std::string config = files::join(dir_, "mix.json");
  std::ofstream(config) << R"({"data": {"mixup": 0.2, "cutmix_minmax": "0.25,0.75", "mixup_prob": 0.5,
                                         "mixup_switch_prob": 0.25, "mixup_mode": "pair", "mixup_off_epoch": 1}})";
  const Result file = run(tiny({"--config", config, "--max-steps", "2"}));
  ASSERT_EQ(file.exit_code, 0) << file.err;
  EXPECT_NE(file.out.find("mixup: alpha 0.2, cutmix alpha 1 (box sides in [0.25, 0.75)), prob 0.5, switch prob 0.25, "
                          "per pair, label smoothing 0 in the soft targets, off from epoch 2"),
            std::string::npos)
      << file.out;
}

// timm's RandAugment / AutoAugment / random erasing (issue 38): bad strings are usage errors that
// say what to write, the options need --augment 1, and the config file's keys reach the run.
TEST_F(TrainVitCli, TimmAugmentationsFromTheCommandLineAndConfigFiles) {
  const Result magnitude = run(tiny({"--augment", "1", "--rand-augment", "rand-m99"}));
  EXPECT_EQ(magnitude.exit_code, 2);
  EXPECT_NE(magnitude.err.find("rand_augment \"rand-m99\": section \"m99\" needs an integer magnitude in [0, 10]"),
            std::string::npos)
      << magnitude.err;
  EXPECT_NE(magnitude.err.find("rand-m9-mstd0.5-inc1"), std::string::npos) << magnitude.err;
  const Result policy = run(tiny({"--augment", "1", "--auto-augment", "imagenet", "--remode", "random"}));
  EXPECT_EQ(policy.exit_code, 2);
  EXPECT_NE(policy.err.find("unknown AutoAugment policy \"imagenet\"; write \"original\""), std::string::npos)
      << policy.err;
  EXPECT_NE(policy.err.find("random erasing mode \"random\": write const"), std::string::npos) << policy.err;
  const Result alone = run(tiny({"--rand-augment", "rand-m9-mstd0.5-inc1"}));
  EXPECT_EQ(alone.exit_code, 2);
  EXPECT_NE(alone.err.find("add --augment 1"), std::string::npos) << alone.err;

  const std::string config = files::join(dir_, "augment.json");
  std::ofstream(config) << R"({"data": {"augment": true, "rand_augment": "rand-m9-mstd0.5-inc1", "reprob": 0.25,
                                         "remode": "pixel"}})";
  const Result file = run(tiny({"--config", config, "--max-steps", "2"}));
  ASSERT_EQ(file.exit_code, 0) << file.err;
  EXPECT_NE(file.out.find("augment: RandAugment rand-m9-mstd0.5-inc1: 2 of 15 ops per image, each with probability "
                          "0.5 at magnitude 9, magnitude noise std 0.5"),
            std::string::npos)
      << file.out;
  EXPECT_NE(file.out.find("augment: random erasing with probability 0.25, mode pixel"), std::string::npos) << file.out;
  const Result dry = run(tiny({"--dry-run", "--augment", "1", "--auto-augment", "original", "--reprob", "0.25"}));
  ASSERT_EQ(dry.exit_code, 0) << dry.err;
  EXPECT_NE(dry.out.find("augment: AutoAugment original: one of timm's 25 `original` ImageNet sub-policies per image"),
            std::string::npos)
      << dry.out;
  EXPECT_NE(dry.out.find("augment: random erasing with probability 0.25, mode const"), std::string::npos) << dry.out;
  const std::string wrong = files::join(dir_, "wrong.json");
  std::ofstream(wrong) << R"({"data": {"augment": true, "auto_augment": 1}})";
  const Result typed = run(tiny({"--config", wrong}));
  EXPECT_EQ(typed.exit_code, 2);
  EXPECT_NE(typed.err.find("data.auto_augment: expected a string"), std::string::npos) << typed.err;
}

// step -> "lr" of the "train" records of a --metrics file (the rate each step used).
std::map<int64_t, double> rates(const std::string& metrics) { return metrics_records::train_field(metrics, "lr"); }

// The schedule a run uses is the one asked for: the rate of every step (6 steps per epoch, base
// 2e-3) under step decay per epoch, and multistep per step with a warmup in steps, from the
// command line and from a config file; and the dropout flags reach the model.
TEST_F(TrainVitCli, TheScheduleAndDropoutAskedForAreTheOnesUsed) {
  const Result step = run(tiny({"--epochs", "3", "--schedule", "step", "--lr-step", "1", "--lr-gamma", "0.5",
                                "--schedule-per", "epoch", "--warmup", "0", "--metrics", files::join(dir_, "step.jsonl"),
                                "--drop-rate", "0.1", "--attn-drop-rate", "0.05", "--drop-path", "0.2"}));
  ASSERT_EQ(step.exit_code, 0) << step.err;
  EXPECT_NE(step.out.find("warmup 0 epochs, x0.5 every 1 epochs (stepped per epoch)"), std::string::npos) << step.out;
  EXPECT_NE(step.out.find("; dropout 0.1, attention dropout 0.05, drop path 0.2"), std::string::npos) << step.out;
  const auto per_epoch = rates(files::join(dir_, "step.jsonl"));
  ASSERT_EQ(per_epoch.size(), 18u);
  for (const auto& [s, lr] : per_epoch) EXPECT_NEAR(lr, 2e-3 * std::pow(0.5, (s - 1) / 6), 1e-15) << "step " << s;

  const std::string config = files::join(dir_, "multistep.json");
  std::ofstream(config) << R"({"schedule": {"name": "multistep", "milestones": "1,2", "gamma": 0.1, "warmup_steps": 2},
                              "model": {"drop_rate": 0.1}})";
  const Result multi = run(tiny({"--epochs", "3", "--config", config, "--metrics", files::join(dir_, "multi.jsonl")}));
  ASSERT_EQ(multi.exit_code, 0) << multi.err;
  EXPECT_NE(multi.out.find("warmup 2 steps, x0.1 at steps 6, 12"), std::string::npos) << multi.out;
  EXPECT_NE(multi.out.find("; dropout 0.1, attention dropout 0, drop path 0"), std::string::npos) << multi.out;
  const auto per_step = rates(files::join(dir_, "multi.jsonl"));
  ASSERT_EQ(per_step.size(), 18u);
  for (const auto& [s, lr] : per_step) {
    const int64_t t = s - 1;  // the step's index
    const double want = t < 2 ? 2e-3 * static_cast<double>(t + 1) / 2 : 2e-3 * std::pow(0.1, t >= 12 ? 2 : t >= 6 ? 1 : 0);
    EXPECT_NEAR(lr, want, 1e-15) << "step " << s;
  }
  const Result linear = run(tiny({"--schedule", "linear", "--warmup-steps", "3", "--max-steps", "1"}));
  ASSERT_EQ(linear.exit_code, 0) << linear.err;
  EXPECT_NE(linear.out.find("warmup 3 steps, linear to 0"), std::string::npos) << linear.out;
}

TEST_F(TrainVitCli, ScheduleOptionsAreChecked) {
  const Result r = run(tiny({"--schedule", "multistep", "--schedule-per", "epochs", "--lr-gamma", "0"}));
  EXPECT_EQ(r.exit_code, 2);
  for (const char* part : {"--schedule multistep needs --lr-milestones", "--schedule-per epochs: not one of step, epoch",
                           "--lr-gamma 0: must be positive"}) {
    EXPECT_NE(r.err.find(part), std::string::npos) << part << " in " << r.err;
  }
  const Result order = run(tiny({"--schedule", "multistep", "--lr-milestones", "3,2", "--epochs", "4"}));
  EXPECT_EQ(order.exit_code, 2);
  EXPECT_NE(order.err.find("--lr-milestones 3,2: expected increasing epochs in [1, --epochs = 4]"), std::string::npos)
      << order.err;
  const Result beyond = run(tiny({"--schedule", "multistep", "--lr-milestones", "5", "--epochs", "4"}));
  EXPECT_EQ(beyond.exit_code, 2);
  const Result both = run(tiny({"--warmup-steps", "3", "--schedule-per", "epoch", "--warmup", "1"}));
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.err.find("--warmup-steps with --schedule-per epoch"), std::string::npos) << both.err;
  EXPECT_NE(both.err.find("--warmup and --warmup-steps: give one of them"), std::string::npos) << both.err;
  const Result drop = run(tiny({"--drop-rate", "1", "--attn-drop-rate", "-0.1"}));
  EXPECT_EQ(drop.exit_code, 2);
  EXPECT_NE(drop.err.find("--drop-rate 1: must be in [0, 1)"), std::string::npos) << drop.err;
  EXPECT_NE(drop.err.find("--attn-drop-rate -0.1: must be in [0, 1)"), std::string::npos) << drop.err;
}

// --save-async: the states it publishes resume as --save's do (the final weights of a run stopped
// at --max-steps and resumed, both saving in the background, are an uninterrupted synchronous
// run's, byte for byte); without --save it is refused; --dry-run plans its host copy.
TEST_F(TrainVitCli, SaveAsyncResumesExactlyLikeSave) {
  const std::vector<std::string> job = {"--epochs", "2", "--drop-path", "0.2"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = job;
    args.insert(args.end(), extra.begin(), extra.end());
    return tiny(args);
  };
  const Result whole = run(with({"--save", files::join(dir_, "whole_state")}));
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  const Result first = run(with({"--max-steps", "4", "--save", files::join(dir_, "state"), "--save-async"}));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_NE(first.out.find("in the background"), std::string::npos) << first.out;
  EXPECT_NE(files::canonical_or_absolute(files::join(dir_, "state", "latest")).find("step-00000004"), std::string::npos);
  const Result second =
      run(with({"--resume", files::join(dir_, "state"), "--save", files::join(dir_, "state"), "--save-async"}));
  ASSERT_EQ(second.exit_code, 0) << second.err;
  for (const char* file : {"model.safetensors", "optimizer.safetensors", "lr_scheduler.json", "training_state.json"}) {
    const auto want = read_file(files::join(dir_, "whole_state", "latest", file));
    EXPECT_FALSE(want.empty()) << file;
    EXPECT_TRUE(want == read_file(files::join(dir_, "state", "latest", file))) << file << " differs";
  }
  EXPECT_EQ(last_line(second.out), last_line(whole.out));

  const Result alone = run(tiny({"--save-async"}));
  EXPECT_EQ(alone.exit_code, 2);
  EXPECT_NE(alone.err.find("--save-async says how --save writes: give --save DIR"), std::string::npos) << alone.err;
  const Result plan = run(tiny({"--dry-run", "--save", files::join(dir_, "planned"), "--save-async"}));
  EXPECT_EQ(plan.exit_code, 0) << plan.err;
  EXPECT_NE(plan.out.find("asynchronous save's host copy"), std::string::npos) << plan.out;
  EXPECT_EQ(run(tiny({"--dry-run"})).out.find("asynchronous save's host copy"), std::string::npos);
}

TEST_F(TrainVitCli, ResumeWithOtherDataSettingsIsRejected) {
  ASSERT_EQ(run(tiny({"--max-steps", "2", "--save", files::join(dir_, "state")})).exit_code, 0);
  const Result r = run(tiny({"--resume", files::join(dir_, "state"), "--grad-accum", "2"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("grad_accum 2 (saved: 1)"), std::string::npos) << r.err;
}

TEST_F(TrainVitCli, ResumeFromADamagedRunRecordSaysSo) {
  ASSERT_EQ(run(tiny({"--max-steps", "2", "--save", files::join(dir_, "state")})).exit_code, 0);
  std::ofstream(files::join(dir_, "state", "latest", "train_vit.json")) << "{\"dataset\": ";
  const Result r = run(tiny({"--resume", files::join(dir_, "state")}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("train_vit.json is damaged"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("resume from another saved state"), std::string::npos) << r.err;
}

// precision=fp8 needs float8 products: on this CPU build it is a usage error saying why and what to
// use instead, before any training.
TEST_F(TrainVitCli, Fp8WithoutFloat8ProductsIsAUsageErrorBeforeTraining) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "train_vit would run on this machine's GPU";
  const Result r = run(tiny({"--precision", "fp8"}));
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("--precision fp8: this build of colo has no CUDA"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Use precision=bf16"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("epoch 1/"), std::string::npos) << "it trained before failing: " << r.out;
}

TEST_F(TrainVitCli, Fp16WithoutCpuKernelsIsAUsageErrorBeforeTraining) {
  try {
    const auto a = torch::ones({2, 2}, torch::kHalf);
    torch::mm(a, a);
    GTEST_SKIP() << "this LibTorch multiplies fp16 matrices on CPUs: fp16 training runs here";
  } catch (const c10::Error&) {
  }
  const Result r = run(tiny({"--precision", "fp16"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--precision fp16: this LibTorch has no fp16 matrix multiply on CPUs"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.out.find("epoch 1/"), std::string::npos) << "it trained before failing: " << r.out;
}

// The issue's damaged checkpoint: 4 bytes of the saved model set to NaN. Resuming from it once
// trained every step at loss NaN and exited 0; now it stops before training, naming file and tensor.
TEST_F(TrainVitCli, ResumeFromACheckpointHoldingANaNIsRefused) {
  ASSERT_EQ(run(tiny({"--max-steps", "2", "--save", files::join(dir_, "state")})).exit_code, 0);
  const std::string model_file = files::join(dir_, "state", "latest", "model.safetensors");
  colo::testing::overwrite_with_nan(model_file, "blocks.0.attn.qkv.weight", 100);
  const Result r = run(tiny({"--resume", files::join(dir_, "state")}));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("model.safetensors: tensor 'blocks.0.attn.qkv.weight' holds 1 non-finite value"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.out.find(" step "), std::string::npos) << "it trained: " << r.out;
}

// A learning rate that makes the weights overflow within a step or two: the loss is NaN from then
// on. With --max-nonfinite-steps 3 the run stops at the first check that sees 3 such steps in a
// row (every 3 steps), with an error naming them, and exits 1 instead of "finishing" at chance.
TEST_F(TrainVitCli, NonFiniteLossForConsecutiveStepsStopsTheRunNamingTheSteps) {
  const std::vector<std::string> diverging = {"--optimizer", "sgd", "--lr", "1e30", "--warmup", "0", "--epochs", "3"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), diverging.begin(), diverging.end());
    return tiny(extra);
  };
  const std::string metrics = files::join(dir_, "metrics.jsonl");
  const Result r = run(with({"--max-nonfinite-steps", "3", "--metrics", metrics}));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("train_vit: error: stopped at step "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the training loss was not finite (NaN or infinite) for "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--max-nonfinite-steps 3 is the limit"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("final test top-1"), std::string::npos) << r.out;
  // The named steps are the logged ones whose loss was not finite, and the run stopped at a check
  // (a multiple of 3) within 3 steps of the third.
  std::ifstream in(metrics);
  int64_t first_bad = 0, last_logged = 0;
  for (std::string line; std::getline(in, line);) {
    const auto record = nlohmann::json::parse(line);
    if (record.at("event") != "train") continue;
    last_logged = record.at("step").get<int64_t>();
    if (first_bad == 0 && record.at("loss").is_null()) first_bad = last_logged;  // JSON has no NaN
  }
  ASSERT_GT(first_bad, 0) << "the loss never became NaN: pick a larger --lr";
  const int64_t stop = first_bad + 2 + (3 - (first_bad + 2) % 3) % 3;
  EXPECT_NE(r.err.find(fmt::format("stopped at step {}: ", stop)), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(fmt::format("(steps {}..{})", first_bad, stop)), std::string::npos) << r.err;
  EXPECT_EQ(last_logged, stop);

  // 0 turns the check off: the run goes to its end, as every run once did.
  const Result unchecked = run(with({"--max-nonfinite-steps", "0"}));
  EXPECT_EQ(unchecked.exit_code, 0) << unchecked.err;
}

TEST_F(TrainVitCli, ResumeFromADirectoryWithoutAStateSaysWhatItExpects) {
  files::create_directories(files::join(dir_, "empty"));
  const Result r = run(tiny({"--resume", files::join(dir_, "empty")}));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("holds no complete training state"), std::string::npos) << r.err;
}

// ---------------------------------------------------------------------------------------------
// Image folders and pretrained weights

const std::string kFineTuneOracle = COLO_BINARY_DIR "/oracle/finetune_vit_tiny.safetensors";

// DIR/train and DIR/val in torchvision's layout: small solid images, one colour per class, PNG
// and JPEG by turns.
void write_image_folder(const std::string& root, const std::vector<std::string>& train_classes,
                        const std::vector<std::string>& val_classes) {
  int n = 0;
  for (const auto& [split, classes, per_class] :
       {std::make_tuple("train", train_classes, 4), std::make_tuple("val", val_classes, 2)}) {
    for (size_t c = 0; c < classes.size(); ++c) {
      const std::string dir = files::join(root, split, classes[c]);
      files::create_directories(dir);
      for (int k = 0; k < per_class; ++k, ++n) {
        std::vector<uint8_t> rgb(40 * 48 * 3);
        for (size_t i = 0; i < rgb.size(); i += 3) {
          rgb[i] = static_cast<uint8_t>(60 * c + 20), rgb[i + 1] = static_cast<uint8_t>(7 * k), rgb[i + 2] = 90;
        }
        if (n % 2 == 0) {
          colo::data::write_png(files::join(dir, fmt::format("{}.png", k)), rgb.data(), 40, 48);
        } else {
          colo::data::write_jpeg(files::join(dir, fmt::format("{}.jpg", k)), rgb.data(), 40, 48);
        }
      }
    }
  }
}

TEST_F(TrainVitCli, FineTunesFromATimmFileWithAnotherHeadOnAnImageFolder) {
  ASSERT_TRUE(files::exists(kFineTuneOracle)) << "run the oracle_finetune_vit fixture";
  const std::string data = files::join(dir_, "photos");
  write_image_folder(data, {"ant", "bee", "cat"}, {"ant", "bee", "cat"});
  const std::string metrics = files::join(dir_, "m.jsonl");
  const Result result =
      run({"--dataset", "imagefolder", "--data-dir", data, "--model", "tiny", "--image-size", "32", "--init",
           kFineTuneOracle, "--batch-size", "6", "--eval-batch-size", "6", "--max-steps", "2", "--threads", "1",
           "--workers", "2", "--augment", "1", "--log-every", "1", "--metrics", metrics});
  ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
  for (const char* part : {"head: 1000 classes in the checkpoint, 3 in the model: re-initialised",
                           "position embeddings: a 14x14 grid in the checkpoint, 2x2 in the model",
                           "image folder", "(3 classes) at 32x32", "data: imagefolder, 12 training / 6 test images",
                           "img/s/core", "final test top-1"}) {
    EXPECT_NE(result.out.find(part), std::string::npos) << part << " not in:\n" << result.out;
  }
  EXPECT_NE(read_file(metrics).find("\"loader_images_per_cpu_s\""), std::string::npos) << read_file(metrics);
}

// --decoder (issue 38): a name it does not know, or nvjpeg on a build without nvJPEG, is a usage
// error before anything is built; the config key data.decoder reaches the run, and auto where
// nvJPEG cannot run trains on the CPU decoder, saying so on the data line.
TEST_F(TrainVitCli, DecoderOptionIsCheckedAndFallsBackWhereNvjpegCannotRun) {
  const std::string data = files::join(dir_, "photos");
  write_image_folder(data, {"ant", "bee"}, {"ant", "bee"});
  const std::vector<std::string> common = {"--dataset", "imagefolder", "--data-dir", data, "--model", "custom",
                                           "--image-size", "16", "--patch-size", "8", "--embed-dim", "16",
                                           "--depth", "1", "--heads", "2", "--batch-size", "4",
                                           "--eval-batch-size", "4", "--threads", "1", "--max-steps", "1"};
  auto with = [&](std::vector<std::string> extra) {
    auto args = common;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  const Result unknown = run(with({"--decoder", "gpu"}));
  EXPECT_EQ(unknown.exit_code, 2) << unknown.out << unknown.err;
  EXPECT_NE(unknown.err.find("--decoder: unknown image decoder 'gpu'"), std::string::npos) << unknown.err;
  if (!colo::data::nvjpeg_compiled()) {
    const Result demanded = run(with({"--decoder", "nvjpeg"}));
    EXPECT_EQ(demanded.exit_code, 2) << demanded.out << demanded.err;
    EXPECT_NE(demanded.err.find("--decoder nvjpeg: this build of colo has no nvJPEG"), std::string::npos)
        << demanded.err;
    EXPECT_EQ(demanded.out.find("epoch 1/"), std::string::npos) << "it trained before failing: " << demanded.out;
  }
  if (torch::cuda::is_available()) return;  // auto would decode on this machine's GPU
  const std::string config = files::join(dir_, "decoder.json");
  std::ofstream(config) << R"({"data": {"decoder": "auto"}})";
  const Result fallback = run(with({"--config", config}));
  ASSERT_EQ(fallback.exit_code, 0) << fallback.out << fallback.err;
  EXPECT_NE(fallback.out.find("data: JPEGs decoded on the CPU by libjpeg-turbo: decoder auto, but"), std::string::npos)
      << fallback.out;
}

TEST_F(TrainVitCli, InitOfAnotherArchitectureIsAShortError) {
  ASSERT_TRUE(files::exists(kFineTuneOracle)) << "run the oracle_finetune_vit fixture";
  const Result result = run({"--dataset", "synthetic", "--synthetic-samples", "10", "--model", "small", "--init",
                             kFineTuneOracle, "--max-steps", "1", "--threads", "1"});
  EXPECT_EQ(result.exit_code, 2) << result.out << result.err;
  EXPECT_LE(std::count(result.err.begin(), result.err.end(), '\n'), 16) << result.err;
  for (const char* part : {"--init", "the checkpoint holds a ViT of patch 16, width 192, depth 12",
                           "Choose the model the checkpoint holds"}) {
    EXPECT_NE(result.err.find(part), std::string::npos) << part << " not in:\n" << result.err;
  }
}

// A saved data position belongs to the folder it was read from: resuming on another one is refused,
// naming both; the same folder under another spelling of its path resumes.
TEST_F(TrainVitCli, ResumeOnAnotherImageFolderIsRejected) {
  const std::string first = files::join(dir_, "photos"), second = files::join(dir_, "other");
  write_image_folder(first, {"ant", "bee"}, {"ant", "bee"});
  write_image_folder(second, {"ant", "bee"}, {"ant", "bee"});
  const std::vector<std::string> common = {"--dataset", "imagefolder", "--model", "custom", "--image-size", "16",
                                           "--patch-size", "8", "--embed-dim", "16", "--depth", "1", "--heads", "2",
                                           "--batch-size", "4", "--eval-batch-size", "4", "--threads", "1"};
  auto with = [&](std::vector<std::string> extra) {
    auto args = common;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  const std::string state = files::join(dir_, "state");
  ASSERT_EQ(run(with({"--data-dir", first, "--max-steps", "1", "--save", state})).exit_code, 0);
  const Result other = run(with({"--data-dir", second, "--max-steps", "2", "--resume", state}));
  EXPECT_EQ(other.exit_code, 2) << other.out << other.err;
  const std::string expected = "data_dir \"" + files::canonical_or_absolute(second) + "\" (saved: \"" +
                               files::canonical_or_absolute(first) + "\")";
  EXPECT_NE(other.err.find(expected), std::string::npos) << other.err;
  const Result same = run(with({"--data-dir", first + "/.", "--max-steps", "2", "--resume", state}));
  EXPECT_EQ(same.exit_code, 0) << same.out << same.err;
}

TEST_F(TrainVitCli, ImageFolderNeedsItsDirectoryAndTheSameClassesInTrainAndVal) {
  Result result = run({"--dataset", "imagefolder"});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.err.find("--dataset imagefolder needs --data-dir DIR"), std::string::npos) << result.err;
  const std::string data = files::join(dir_, "photos");
  write_image_folder(data, {"ant", "bee", "cat"}, {"ant", "bee"});
  result = run({"--dataset", "imagefolder", "--data-dir", data, "--max-steps", "1", "--threads", "1"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.err.find("hold different classes (only in train: cat; only in val: none)"), std::string::npos)
      << result.err;
}

TEST_F(TrainVitCli, TheFineTuneExampleTrainsFromPretrainedWeights) {
  ASSERT_TRUE(files::exists(kFineTuneOracle)) << "run the oracle_finetune_vit fixture";
  const std::string data = files::join(dir_, "photos");
  write_image_folder(data, {"ant", "bee"}, {"ant", "bee"});
  const Result result = run_shell("env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE OMP_NUM_THREADS=1 " +
                                  quote(COLO_BINARY_DIR "/bin/finetune") + " " + quote(kFineTuneOracle) + " " +
                                  quote(data) + " --model tiny --image-size 32 --epochs 2 --batch-size 4");
  ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
  EXPECT_NE(result.out.find("init: head: 1000 classes in the checkpoint, 2 in the model"), std::string::npos)
      << result.out;
  EXPECT_NE(result.out.find("epoch 2/2: val top-1"), std::string::npos) << result.out;
}

}  // namespace

// --config: every file in examples/configs/ parses and plans; the small layouts train on CPU ranks
// (a tiny model and data set given on the command line, which overrides the file); bad files are
// refused with what to change.
class TrainVitConfig : public TrainVitCli {
 protected:
  static std::string config(const std::string& name) { return files::join(COLO_SOURCE_DIR "/examples/configs", name); }

  // The small layouts on a model their splits fit (width 16, 4 heads, 3 blocks: 4 pipeline cuts).
  static std::vector<std::string> tiny_override(std::vector<std::string> extra) {
    std::vector<std::string> args = {"--dataset", "synthetic", "--synthetic-samples", "96", "--image-size", "16",
                                     "--model", "custom", "--patch-size", "8", "--embed-dim", "16", "--depth", "3",
                                     "--heads", "4", "--epochs", "1", "--max-steps", "3", "--threads", "1",
                                     "--batch-size", "16", "--log-every", "1", "--eval-batch-size", "32"};
    args.insert(args.begin(), extra.begin(), extra.end());
    return args;
  }

  std::string write(const std::string& name, const std::string& text) const {
    const auto path = files::join(dir_, name);
    std::ofstream(path) << text;
    return path;
  }
};

struct SmallLayout {
  const char* file;
  int ranks;
  const char* layout;  // as train_vit's first line prints the mesh
};

TEST_F(TrainVitConfig, TheSmallLayoutsTrainOnCpuRanks) {
  const std::vector<SmallLayout> layouts = {{"data_parallel.json", 2, "(dp=2 pp=1 tp=1)"},
                                            {"pipeline_2x4.json", 2, "(dp=1 pp=2 tp=1)"},
                                            {"pipeline_interleaved_2chunks.json", 2, "(dp=1 pp=2 tp=1)"},
                                            {"tensor_parallel_2.json", 2, "(dp=1 pp=1 tp=2)"},
                                            {"tensor_parallel_4.json", 4, "(dp=1 pp=1 tp=4)"}};
  for (const auto& layout : layouts) {
    const auto metrics = files::join(dir_, std::string(layout.file) + ".jsonl");
    const Result r = run_on(layout.ranks, tiny_override({"--config", config(layout.file), "--metrics", metrics}));
    ASSERT_EQ(r.exit_code, 0) << layout.file << "\n" << r.out << r.err;
    EXPECT_NE(r.out.find(layout.layout), std::string::npos) << layout.file << "\n" << r.out;
    // The command line won over the file (fashion-mnist, 6 epochs, the mini model there).
    EXPECT_NE(r.out.find("data: synthetic, 96 training"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("schedule: 1 epochs x 6 steps = 6 steps (stopping at 3)"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("final test top-1: "), std::string::npos) << r.out;
    EXPECT_EQ(losses(metrics).size(), 3u) << layout.file;
  }
  // The file's own settings reach the plugin: the interleaved one runs 2 chunks of 4 microbatches.
  const Result r = run_on(2, tiny_override({"--config", config("pipeline_interleaved_2chunks.json"), "--plugin-opt",
                                            "num_model_chunks=3"}));
  EXPECT_NE(r.exit_code, 0) << "3 chunks of 4 layers on 2 stages were accepted: " << r.out;
  EXPECT_NE(r.err.find("layers cannot be cut into pp_size 2 x num_model_chunks 3 = 6 stages"), std::string::npos)
      << "refused, but not for its chunks: " << r.out << r.err;
}

// The hybrid example's layout words: "parallel": {"pipeline": P, "tensor": {"mode", "size", "depth"}}
// set pp_size, tp_mode, tp_size and tp_depth. 1d trains on 4 and 8 ranks, 2d on 4 (a 2 x 2 grid) and
// its dry run plans it, as it does 2.5d's (2 layers of a 2 x 2 grid); 3d trains on 8 (a 2 x 2 x 2
// cube) and plans; sizes a mode cannot take name the ones it can.
TEST_F(TrainVitConfig, TheHybridExamplesLayoutWordsSetTheTensorAndPipelineSizes) {
  const auto words = write("words.json", R"({"plugin": "hybrid_parallel", "parallel": {"pipeline": 2, "microbatches": 2,
                                             "tensor": {"mode": "1d", "size": 2}}})");
  for (const auto& [ranks, layout] : std::vector<std::pair<int, std::string>>{{4, "(dp=1 pp=2 tp=2)"},
                                                                              {8, "(dp=2 pp=2 tp=2)"}}) {
    const auto metrics = files::join(dir_, fmt::format("words_{}.jsonl", ranks));
    const Result r = run_on(ranks, tiny_override({"--config", words, "--metrics", metrics}));
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find(layout), std::string::npos) << r.out;
    EXPECT_EQ(losses(metrics).size(), 3u) << ranks;
  }
  const auto refused = [&](const std::string& name, const std::string& parallel, int world, const std::string& says) {
    const auto file = write(name, R"({"plugin": "hybrid_parallel", "parallel": )" + parallel + "}");
    const Result r = run(tiny_override({"--config", file, "--dry-run", "--world-size", std::to_string(world)}));
    EXPECT_EQ(r.exit_code, 2) << name << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find(says), std::string::npos) << name << "\n" << r.err;
  };
  const auto grid = write("grid.json", R"({"plugin": "hybrid_parallel", "parallel": {"tensor": {"mode": "2d", "size": 4}}})");
  const auto grid_metrics = files::join(dir_, "grid.jsonl");
  const Result trained = run_on(4, tiny_override({"--config", grid, "--metrics", grid_metrics}));
  ASSERT_EQ(trained.exit_code, 0) << trained.out << trained.err;
  EXPECT_NE(trained.out.find("(dp=1 pp=1 tp=4)"), std::string::npos) << trained.out;
  EXPECT_EQ(losses(grid_metrics).size(), 3u);
  const Result planned = run(tiny_override({"--config", grid, "--dry-run", "--world-size", "4"}));
  EXPECT_EQ(planned.exit_code, 0) << planned.out << planned.err;
  EXPECT_NE(planned.out.find("tensor parallelism 2d on a 2x2 grid"), std::string::npos) << planned.out;
  // 3d on a 2 x 2 x 2 cube: trains 3 steps on 8 ranks, and its dry run plans it.
  const auto cube = write("cube.json", R"({"plugin": "hybrid_parallel", "parallel": {"tensor": {"mode": "3d", "size": 8}}})");
  const auto cube_metrics = files::join(dir_, "cube.jsonl");
  const Result cubed = run_on(8, tiny_override({"--config", cube, "--metrics", cube_metrics}));
  ASSERT_EQ(cubed.exit_code, 0) << cubed.out << cubed.err;
  EXPECT_NE(cubed.out.find("(dp=1 pp=1 tp=8)"), std::string::npos) << cubed.out;
  EXPECT_EQ(losses(cube_metrics).size(), 3u);
  const Result cube_plan = run(tiny_override({"--config", cube, "--dry-run", "--world-size", "8"}));
  EXPECT_EQ(cube_plan.exit_code, 0) << cube_plan.out << cube_plan.err;
  EXPECT_NE(cube_plan.out.find("tensor parallelism 3d on a 2x2x2 cube"), std::string::npos) << cube_plan.out;
  refused("four_cube.json", R"({"tensor": {"mode": "3d", "size": 4}})", 4,
          "tp_mode=3d needs tp_size = q³ (a q × q × q cube), got 4: use 1 or 8");
  // 2.5d plans (its training is tests/dist/layout_equivalence_test.cpp's 2.5d rows).
  const auto tesseract = write("tesseract.json",
                               R"({"plugin": "hybrid_parallel", "parallel": {"tensor": {"mode": "2.5d", "size": 8, "depth": 2}}})");
  const Result layered = run(tiny_override({"--config", tesseract, "--dry-run", "--world-size", "8"}));
  EXPECT_EQ(layered.exit_code, 0) << layered.out << layered.err;
  EXPECT_NE(layered.out.find("tensor parallelism 2.5d on 2 layers of a 2x2 grid"), std::string::npos) << layered.out;
  refused("six.json", R"({"tensor": {"mode": "2d", "size": 6}})", 6,
          "tp_mode=2d needs tp_size = q² (a q × q grid), got 6: use 4 or 9");
  refused("both.json", R"({"tp": 2, "tensor": {"mode": "1d", "size": 2}})", 2,
          "parallel.tp and parallel.tensor both give the tensor-parallel size; keep one");
  refused("pipes.json", R"({"pp": 2, "pipeline": 2})", 2, "parallel.pp and parallel.pipeline both give the pipeline size");
  refused("layers.json", R"({"tensor": {"mode": "2d", "layers": 2}})", 4,
          "unknown key 'layers' in parallel.tensor; the valid keys of parallel.tensor are: depth, mode, size");
  refused("flat.json", R"({"tensor": 4})", 4, "parallel.tensor: expected an object");
}

TEST_F(TrainVitConfig, EveryConfigParsesAndTheLargeOnesPlanEveryRankOnH200s) {
  std::vector<std::string> names = files::list_directory(COLO_SOURCE_DIR "/examples/configs");
  std::sort(names.begin(), names.end());
  ASSERT_EQ(names.size(), 10u);
  for (const auto& name : names) {
    const bool large = name.rfind("hybrid_vit_", 0) == 0;
    const int world = large ? (name.find("64gpu") != std::string::npos ? 64 : 32)
                            : (name == "tensor_parallel_4.json" ? 4 : 2);
    std::vector<std::string> args = {"--config", config(name), "--dataset", "synthetic", "--synthetic-samples", "10",
                                     "--dry-run", "--world-size", std::to_string(world)};
    if (large) args.insert(args.end(), {"--gpu-memory-gib", "141"});
    const Result r = run(args);
    ASSERT_EQ(r.exit_code, 0) << name << "\n" << r.out << r.err;
    EXPECT_NE(r.out.find(fmt::format("on {} {} ranks", world, large ? "GPU" : "CPU")), std::string::npos) << r.out;
    if (!large) continue;
    // The hybrid ViT: 6.4 B parameters, every one of the world's ranks planned and printed.
    EXPECT_NE(r.out.find("activation checkpointing"), std::string::npos) << r.out;
    if (name.find("_2d") != std::string::npos) {
      EXPECT_NE(r.out.find("tensor parallelism 2d on a 2x2 grid"), std::string::npos) << r.out;
    }
    if (name.find("_2p5d") != std::string::npos) {
      EXPECT_NE(r.out.find("tensor parallelism 2.5d on 2 layers of a 2x2 grid"), std::string::npos) << r.out;
    }
    if (name.find("_3d") != std::string::npos) {
      EXPECT_NE(r.out.find("tensor parallelism 3d on a 2x2x2 cube"), std::string::npos) << r.out;
    }
    EXPECT_NE(r.out.find("global batch " + std::string(world == 32 ? "256" : "512")), std::string::npos) << r.out;
    // The plan prints ranks that hold alike in groups ("ranks 0,1,2,...,19 (8 ranks) (pp 0 of 4; ...)"):
    // the groups cover the world, one per pipeline stage.
    int64_t covered = 0, groups = 0;
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("rank ", 0) == 0) covered += 1, ++groups;
      if (line.rfind("ranks ", 0) != 0) continue;
      const auto open = line.find(" ranks)");
      const auto start = line.rfind('(', open);
      ASSERT_NE(open, std::string::npos) << line;
      covered += std::stoll(line.substr(start + 1, open - start - 1));
      ++groups;
    }
    EXPECT_EQ(covered, world) << r.out;
    EXPECT_EQ(groups, 4) << r.out;  // pp 4: the stages hold different layers
    std::printf("%s", r.out.c_str());  // the estimate, in the test's log
  }
}

TEST_F(TrainVitConfig, AnUnknownKeyIsRefusedListingTheValidKeys) {
  const Result inner = run({"--config", write("inner.json", R"({"model": {"preset": "mini", "hiden": 64}})")});
  EXPECT_EQ(inner.exit_code, 2) << inner.out << inner.err;
  EXPECT_NE(inner.err.find("unknown key 'hiden' in model (did you mean 'hidden'?); the valid keys of model are: "
                           "activation_checkpointing, attn_drop_rate, depth, drop_path, drop_rate, heads, hidden, image_size, init, mlp_ratio, "
                           "patch_size, preset"),
            std::string::npos)
      << inner.err;
  const Result top = run({"--config", write("top.json", R"({"optimiser": {"lr": 0.1}})")});
  EXPECT_EQ(top.exit_code, 2) << top.out << top.err;
  EXPECT_NE(top.err.find("unknown key 'optimiser' (did you mean 'optimizer'?); the valid keys are: "),
            std::string::npos)
      << top.err;
  EXPECT_NE(top.err.find("parallel, plugin, plugin_options, precision, schedule, train"), std::string::npos) << top.err;
}

TEST_F(TrainVitConfig, BadValuesAndFilesSayWhatToChange) {
  const Result type = run({"--config", write("type.json", R"({"train": {"epochs": "three"}})")});
  EXPECT_EQ(type.exit_code, 2);
  EXPECT_NE(type.err.find("train.epochs: expected a whole number, got \"three\""), std::string::npos) << type.err;
  // A value the file gives goes through the command line's checks.
  const Result range = run({"--config", write("range.json", R"({"train": {"epochs": 0}})")});
  EXPECT_EQ(range.exit_code, 2);
  EXPECT_NE(range.err.find("--epochs 0: must be at least 1"), std::string::npos) << range.err;
  const Result broken = run({"--config", write("broken.json", "{\"train\": ")});
  EXPECT_EQ(broken.exit_code, 2);
  EXPECT_NE(broken.err.find("not valid JSON"), std::string::npos) << broken.err;
  const Result missing = run({"--config", files::join(dir_, "none.json")});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("cannot read the file"), std::string::npos) << missing.err;
  // The plugin checks the parallel options as it checks --plugin-opt: torch_ddp has no pp_size.
  const Result plugin = run({"--config", write("plugin.json", R"({"plugin": "torch_ddp", "parallel": {"pp": 2}})"),
                             "--dataset", "synthetic", "--synthetic-samples", "10"});
  EXPECT_EQ(plugin.exit_code, 2) << plugin.out << plugin.err;
  EXPECT_NE(plugin.err.find("pp_size"), std::string::npos) << plugin.err;
}

// ---------------------------------------------------------------------------------------------
// What a hostile user found (issue 33): evaluation under a pipeline, --dry-run, memory sizes,
// --config with another plugin or a key given twice.

namespace {

// `args` with the values of some of its options replaced ("--heads" -> "3").
std::vector<std::string> with_values(std::vector<std::string> args, const std::map<std::string, std::string>& values) {
  for (const auto& [option, value] : values) {
    auto it = std::find(args.begin(), args.end(), option);
    if (it == args.end() || it + 1 == args.end()) {
      args.push_back(option);
      args.push_back(value);
    } else {
      *(it + 1) = value;
    }
  }
  return args;
}

std::vector<std::string> joined(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Every file under `dir` whose name ends with ".safetensors", relative to it.
std::vector<std::string> safetensors_files(const std::string& dir) {
  std::vector<std::string> found;
  for (const auto& name : files::list_directory(dir)) {
    if (name.size() > 12 && name.compare(name.size() - 12, 12, ".safetensors") == 0) found.push_back(name);
  }
  std::sort(found.begin(), found.end());
  return found;
}

}  // namespace

// A two-stage pipeline with stochastic depth, stopped at --max-steps and resumed, continues
// exactly as the uninterrupted run (as under torch_ddp, ResumeContinuesExactly): its evaluations
// (one at the stop, one per epoch) run every stage in eval mode and draw no random numbers.
TEST_F(TrainVitCli, ResumedPipelineWithDropPathContinuesExactly) {
  if (!files::exists(kColoRun)) GTEST_SKIP() << kColoRun << " is not built";
  const std::vector<std::string> job = {"--epochs",   "2",          "--drop-path", "0.2", "--plugin", "hybrid_parallel",
                                        "--plugin-opt", "pp_size=2", "--plugin-opt", "num_microbatches=2"};
  auto with = [&](const std::vector<std::string>& extra) { return tiny(joined(job, extra)); };
  const Result whole =
      run_on(2, with({"--metrics", files::join(dir_, "whole.jsonl"), "--save", files::join(dir_, "whole_state")}));
  ASSERT_EQ(whole.exit_code, 0) << whole.out << whole.err;
  const Result first = run_on(2, with({"--max-steps", "4", "--save", files::join(dir_, "state")}));
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  const Result second = run_on(2, with({"--resume", files::join(dir_, "state"), "--metrics",
                                        files::join(dir_, "resumed.jsonl"), "--save", files::join(dir_, "state")}));
  ASSERT_EQ(second.exit_code, 0) << second.out << second.err;

  const auto expected = losses(files::join(dir_, "whole.jsonl"));
  const auto resumed = losses(files::join(dir_, "resumed.jsonl"));
  ASSERT_EQ(expected.size(), 12u);  // 6 steps per epoch
  ASSERT_EQ(resumed.size(), 8u);    // steps 5..12
  for (const auto& [step, loss] : resumed) {
    ASSERT_TRUE(expected.count(step)) << "step " << step;
    EXPECT_EQ(loss, expected.at(step)) << "step " << step;
  }
  // Each stage's weights and optimizer state, byte for byte.
  const auto want_dir = files::join(dir_, "whole_state", "latest"), got_dir = files::join(dir_, "state", "latest");
  const auto saved = safetensors_files(want_dir);
  EXPECT_GE(saved.size(), 2u);
  EXPECT_EQ(safetensors_files(got_dir), saved);
  for (const auto& file : saved) {
    EXPECT_TRUE(read_file(files::join(want_dir, file)) == read_file(files::join(got_dir, file))) << file << " differs";
  }
  EXPECT_EQ(last_line(second.out), last_line(whole.out));
}

// --dry-run runs the run's checks of the layout through the same code: what the run refuses (at
// boost, or at its first step), the plan refuses in the same words.
TEST_F(TrainVitCli, DryRunRefusesTheLayoutsTheRunRefuses) {
  if (!files::exists(kColoRun)) GTEST_SKIP() << kColoRun << " is not built";
  struct Refused {
    std::vector<std::string> args;
    std::string words;
  };
  const std::vector<std::string> pipeline = {"--plugin", "hybrid_parallel", "--plugin-opt", "pp_size=2"};
  const std::vector<Refused> cases = {
      {tiny(joined(pipeline, {"--plugin-opt", "num_microbatches=3"})),
       "a batch of 16 does not split into num_microbatches=3 equal microbatches"},
      {tiny(joined(pipeline, {"--plugin-opt", "microbatch_size=3"})),
       "a batch of 16 does not split into microbatches of microbatch_size=3"},
      {with_values(tiny({"--plugin", "hybrid_parallel", "--plugin-opt", "tp_size=2"}),
                   {{"--embed-dim", "18"}, {"--heads", "3"}}),
       "tensor parallelism over 2 ranks: 3 heads do not divide over tp_size=2"},
      {with_values(tiny(), {{"--batch-size", "15"}}),
       "a global batch of 15 does not split over 2 data-parallel ranks x 1 accumulation step; use a multiple of 2"},
      {tiny(joined(pipeline, {"--plugin-opt", "num_microbatches=2", "--grad-accum", "2"})),
       "--grad-accum 2: plugin hybrid_parallel runs a pipeline"},
  };
  for (const auto& refused : cases) {
    const Result dry = run(joined(refused.args, {"--dry-run", "--world-size", "2"}));
    EXPECT_EQ(dry.exit_code, 2) << refused.words << "\n" << dry.out << dry.err;
    EXPECT_NE(dry.err.find(refused.words), std::string::npos) << dry.err;
    const Result real = run_on(2, joined(refused.args, {"--max-steps", "1"}));
    EXPECT_NE(real.exit_code, 0) << refused.words << "\n" << real.out << real.err;
    EXPECT_NE(real.err.find(refused.words), std::string::npos) << real.err;
  }
  // The same layouts with a batch that splits are planned.
  const Result fine =
      run(joined(tiny(joined(pipeline, {"--plugin-opt", "num_microbatches=4"})), {"--dry-run", "--world-size", "2"}));
  EXPECT_EQ(fine.exit_code, 0) << fine.out << fine.err;
  EXPECT_NE(fine.out.find("4 microbatches of 4 samples"), std::string::npos) << fine.out;
}

// A dry-run plans from shapes: a ViT whose every block holds more than the address space allowed
// here (qkv alone: 3 x 65536^2 floats, 48 GiB, against 8 GiB) is planned, where building one
// block to summarise it failed with LibTorch's allocator message.
TEST_F(TrainVitCli, DryRunOfAModelLargerThanTheMachineAllocatesNoLayer) {
  const std::vector<std::string> args = {"--dataset", "synthetic", "--synthetic-samples", "10", "--model", "custom",
                                         "--image-size", "224", "--patch-size", "16", "--embed-dim", "65536",
                                         "--depth", "2", "--heads", "512", "--batch-size", "8", "--threads", "1",
                                         "--dry-run", "--world-size", "8", "--gpu-memory-gib", "141"};
  std::string command = "ulimit -v 8388608; exec env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE " +
                        quote(kTrainVit);
  for (const auto& arg : args) command += " " + quote(arg);
  const Result r = run_shell("sh -c " + quote(command));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("nothing was allocated"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("memory plan: torch_ddp"), std::string::npos) << r.out;
  // 2 blocks of 12 x 65536^2 + 13 x 65536 parameters, the embedding's 967 x 65536, the head's 12 x 65536 + 10.
  EXPECT_NE(r.out.find("model: 103145.08 M parameters"), std::string::npos) << r.out;
}

// Memory sizes are range-checked in the option's own words: --gpu-memory-gib takes up to 1 PiB
// (1048576 GiB); beyond, it once overflowed to -9223372036854775808 bytes.
TEST_F(TrainVitCli, GpuMemoryGibIsRangeCheckedAtItsLimit) {
  auto plan = [&](const std::string& gib) {
    return run({"--dataset", "synthetic", "--synthetic-samples", "10", "--model", "tiny", "--dry-run", "--plugin",
                "gemini", "--plugin-opt", "placement_policy=auto", "--gpu-memory-gib", gib});
  };
  for (const char* fits : {"1048575", "1048576"}) {
    const Result r = plan(fits);
    EXPECT_EQ(r.exit_code, 0) << fits << "\n" << r.out << r.err;
    EXPECT_EQ(r.out.find("-9223372036854775808"), std::string::npos) << r.out;
  }
  for (const char* too_large : {"1048577", "1e10"}) {
    const Result r = plan(too_large);
    EXPECT_EQ(r.exit_code, 2) << too_large << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find(": must be a size in GiB from 0 to 1048576 (1 PiB)"), std::string::npos) << r.err;
  }
  EXPECT_NE(plan("1048577").err.find("--gpu-memory-gib 1048577: must be a size in GiB"), std::string::npos);
  // A plugin's own size option, as the plugin reads it.
  const Result device = run({"--dataset", "synthetic", "--synthetic-samples", "10", "--model", "tiny", "--dry-run",
                             "--plugin", "gemini", "--plugin-opt", "placement_policy=auto", "--plugin-opt",
                             "device_memory_mb=1e14"});
  EXPECT_EQ(device.exit_code, 2) << device.out << device.err;
  EXPECT_NE(device.err.find("option device_memory_mb='1e14' must be a size in MiB from 0 to 1073741824 (1 PiB)"),
            std::string::npos)
      << device.err;
}

// --config FILE --plugin OTHER: the file's parallel and plugin_options sections are its plugin's;
// another plugin runs without them, and the run says so. A file without a plugin of its own gives
// its options to the plugin that runs, and an error about them names the file's keys.
TEST_F(TrainVitConfig, AnotherPluginLeavesTheFilesParallelSectionOutAndSaysSo) {
  const auto file = write("pipe.json", R"({"plugin": "hybrid_parallel", "parallel": {"pp": 2, "microbatches": 2},
                                           "plugin_options": {"bucket_cap_mb": 4}})");
  const Result other = run(tiny_override({"--config", file, "--plugin", "torch_ddp"}));
  ASSERT_EQ(other.exit_code, 0) << other.out << other.err;
  EXPECT_NE(other.out.find("note: --plugin torch_ddp replaces the plugin of --config " + file +
                           " (hybrid_parallel): its options for hybrid_parallel are left out (parallel.microbatches, "
                           "parallel.pp, plugin_options.bucket_cap_mb)"),
            std::string::npos)
      << other.out;
  EXPECT_NE(other.out.find("train_vit: plugin torch_ddp"), std::string::npos) << other.out;

  const auto plain = write("plain.json", R"({"parallel": {"pp": 2}})");
  const Result blamed = run(tiny_override({"--config", plain}));
  EXPECT_EQ(blamed.exit_code, 2) << blamed.out << blamed.err;
  EXPECT_NE(blamed.err.find("pp_size from parallel.pp of " + plain), std::string::npos) << blamed.err;
  const Result planned = run(tiny_override({"--config", plain, "--dry-run"}));
  EXPECT_EQ(planned.exit_code, 2) << planned.out << planned.err;
  EXPECT_NE(planned.err.find("pp_size from parallel.pp of " + plain), std::string::npos) << planned.err;
}

// parallel.schedule_file is pp_schedule_file: the file is read (and refused) before anything runs,
// and a schedule that reads is planned.
TEST_F(TrainVitConfig, ParallelScheduleFileIsThePluginsScheduleFile) {
  const auto deadlock = write("deadlock.txt", "0F0,0B0,0F1,0B1\n1F0,1F1,1B0,1B1\n");
  const auto refused = write("refused.json", R"({"plugin": "hybrid_parallel", "parallel": {"pp": 2, "schedule_file": ")" +
                                                 deadlock + R"("}})");
  const Result dry = run(tiny_override({"--config", refused, "--dry-run", "--world-size", "2"}));
  EXPECT_EQ(dry.exit_code, 2) << dry.out << dry.err;
  EXPECT_NE(dry.err.find(deadlock + ":1: rank 0 never runs its action 1 (0B0)"), std::string::npos) << dry.err;
  const auto one_f_one_b = write("1f1b.txt", "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n");
  const auto fine = write("fine.json", R"({"plugin": "hybrid_parallel", "parallel": {"pp": 2, "schedule_file": ")" +
                                           one_f_one_b + R"("}})");
  const Result planned = run(tiny_override({"--config", fine, "--dry-run", "--world-size", "2"}));
  EXPECT_EQ(planned.exit_code, 0) << planned.out << planned.err;
  EXPECT_NE(planned.out.find("2 microbatches of 8 samples"), std::string::npos) << planned.out;
}

// A key given twice in one object is refused, naming it and where; the same key in two objects is two keys.
TEST_F(TrainVitConfig, AKeyGivenTwiceIsRefusedNamingItAndWhere) {
  const Result inner = run({"--config", write("inner.json", R"({"optimizer": {"lr": 0.1, "name": "sgd", "lr": 0.2}})")});
  EXPECT_EQ(inner.exit_code, 2) << inner.out << inner.err;
  EXPECT_NE(inner.err.find("inner.json: the key 'lr' is given twice in optimizer; keep one"), std::string::npos)
      << inner.err;
  const Result top = run({"--config", write("top.json", R"({"plugin": "torch_ddp", "precision": "bf16",
                                                            "plugin": "gemini"})")});
  EXPECT_EQ(top.exit_code, 2) << top.out << top.err;
  EXPECT_NE(top.err.find("top.json: the key 'plugin' is given twice at the top level; keep one"), std::string::npos)
      << top.err;
  const Result nested = run({"--config", write("nested.json", R"({"plugin_options": {"a": {"b": 1, "b": 2}}})")});
  EXPECT_EQ(nested.exit_code, 2) << nested.out << nested.err;
  EXPECT_NE(nested.err.find("the key 'b' is given twice in plugin_options.a; keep one"), std::string::npos)
      << nested.err;
  const Result apart = run({"--config", write("apart.json", R"({"optimizer": {"name": "sgd"},
                                                               "schedule": {"name": "cosine"}})"),
                            "--dataset", "synthetic", "--synthetic-samples", "10", "--dry-run"});
  EXPECT_EQ(apart.exit_code, 0) << apart.out << apart.err;
}

namespace {

// --dry-run plans from shapes and reads no data set: the built-in sets' shapes are known without
// their files, and a missing image folder is assumed (and said). It failed on the data directory.
TEST_F(TrainVitCli, DryRunReadsNoDataSet) {
  const std::string missing = files::join(dir_, "no_such_data");
  for (const char* dataset : {"fashion-mnist", "cifar10", "imagefolder"}) {
    const Result r = run({"--dataset", dataset, "--data-dir", missing, "--model", "mini", "--image-size", "32",
                          "--dry-run", "--world-size", "2"});
    EXPECT_EQ(r.exit_code, 0) << dataset << "\n" << r.out << r.err;
    EXPECT_NE(r.out.find("memory plan: torch_ddp"), std::string::npos) << dataset << "\n" << r.out;
  }
  const Result folder = run({"--dataset", "imagefolder", "--data-dir", missing, "--model", "mini", "--image-size",
                             "32", "--dry-run"});
  EXPECT_NE(folder.out.find("no_such_data/train is not there: the plan assumes 32x32 RGB images of 1000 classes"),
            std::string::npos)
      << folder.out;
}

// --sync-every-microbatch: each micro-batch's gradients are synchronised, so the plan keeps no whole
// gradients between them (gemini, ZeRO-2); without accumulation it would do nothing and is refused.
TEST_F(TrainVitCli, SyncEveryMicrobatchPlansNoWholeGradientsAndNeedsAccumulation) {
  const auto gemini = [](std::vector<std::string> extra) {
    return tiny(joined({"--plugin", "gemini", "--dry-run", "--world-size", "2"}, extra));
  };
  const Result accumulated = run(gemini({"--grad-accum", "2"}));
  EXPECT_EQ(accumulated.exit_code, 0) << accumulated.err;
  EXPECT_NE(accumulated.out.find("gradients kept whole for accumulation"), std::string::npos) << accumulated.out;
  const Result synchronised = run(gemini({"--grad-accum", "2", "--sync-every-microbatch"}));
  EXPECT_EQ(synchronised.exit_code, 0) << synchronised.err;
  EXPECT_EQ(synchronised.out.find("gradients kept whole for accumulation"), std::string::npos) << synchronised.out;
  EXPECT_NE(synchronised.out.find("in 2 passes per step (each synchronised)"), std::string::npos) << synchronised.out;

  const Result alone = run(gemini({"--sync-every-microbatch"}));
  EXPECT_EQ(alone.exit_code, 2);
  EXPECT_NE(alone.err.find("--sync-every-microbatch: with --grad-accum 1 every step is one micro-batch"),
            std::string::npos)
      << alone.err;
  // It trains, from the command line and from a config file's [train] section.
  EXPECT_EQ(run(tiny({"--grad-accum", "2", "--sync-every-microbatch", "--max-steps", "2", "--epochs", "1"})).exit_code, 0);
  const std::string config = files::join(dir_, "sync.json");
  std::ofstream(config) << R"({"train": {"grad_accum": 2, "sync_every_microbatch": true}})";
  const Result from_file = run(gemini({"--config", config}));
  EXPECT_EQ(from_file.exit_code, 0) << from_file.err;
  EXPECT_NE(from_file.out.find("(each synchronised)"), std::string::npos) << from_file.out;
}

}  // namespace
