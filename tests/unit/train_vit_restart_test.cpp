// A training job that survives failures: train_vit --resume auto under colo-run --max-restarts,
// with faults injected through COLO_FAULT (crashes, a hang), ends on its own with weights
// bit-identical to an uninterrupted run's (same seed, same checkpoint interval); --resume auto
// starts fresh on an empty directory, continues its own run's state, and refuses another run's.
// Tiny jobs (16x16 synthetic images, a two-block ViT) on CPU ranks.
#include <colo/files/files.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "command_output.h"
#include "metrics_records.h"

namespace {

using command_output::read_file;
using command_output::quote;
using command_output::count_of;
using command_output::free_port;

namespace files = colo::files;

const std::string kColoRun = COLO_BINARY_DIR "/bin/colo-run";
const std::string kTrainVit = COLO_BINARY_DIR "/bin/train_vit";

struct Result {
  int exit_code = -1;
  std::string out, err;
};

class TrainVitRestart : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!files::exists(kTrainVit)) GTEST_SKIP() << kTrainVit << " is not built (COLO_BUILD_EXAMPLES=OFF?)";
    dir_ = files::make_temp_directory("train_vit_restart_");
  }
  void TearDown() override {
    if (!dir_.empty()) files::remove_all(dir_);
  }

  // `launcher` (colo-run and its options, or nothing: a job of one) runs train_vit with `args`;
  // `env` adds variables. Bounded by 120 s.
  Result run(const std::vector<std::string>& launcher, const std::vector<std::string>& args,
             const std::string& env = "") const {
    std::string command =
        "env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE -u COLO_RDZV_FILE -u COLO_FAULT "
        "-u COLO_RESTART_COUNT OMP_NUM_THREADS=1 " + env + " timeout 120";
    for (const auto& arg : launcher) command += " " + quote(arg);
    command += " " + quote(kTrainVit);
    for (const auto& arg : args) command += " " + quote(arg);
    command += " >" + quote(path("stdout.txt")) + " 2>" + quote(path("stderr.txt"));
    const int status = std::system(command.c_str());
    Result result;
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    result.out = read_file(path("stdout.txt"));
    result.err = read_file(path("stderr.txt"));
    return result;
  }

  // Two colo-run as nodes 0 and 1 of one job over loopback (`node_args`: each one's options after
  // --nnodes 2 --node-rank R), both running train_vit with `args`; each node's output and status
  // in `node<R>.out/.err/.rc`. Bounded by 120 s.
  std::vector<Result> run_nodes(const std::vector<std::string>& node_args, const std::vector<std::string>& args,
                                const std::string& env) const {
    std::string script;
    for (int node : {1, 0}) {
      std::string command = "env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE -u COLO_RDZV_FILE -u COLO_FAULT "
                            "-u COLO_RESTART_COUNT OMP_NUM_THREADS=1 COLO_JOB_TOKEN=" + std::string(64, 'c') + " " +
                            env + " timeout 120 " + quote(kColoRun) + " --nnodes 2 --node-rank " + std::to_string(node);
      for (const auto& arg : node_args) command += " " + quote(arg);
      command += " " + quote(kTrainVit);
      for (const auto& arg : args) command += " " + quote(arg);
      const std::string name = path("node" + std::to_string(node));
      command += " >" + quote(name + ".out") + " 2>" + quote(name + ".err") + "; echo $? >" + quote(name + ".rc");
      script += node == 1 ? "(" + command + ") & " : command + "; wait";
    }
    std::system(("sh -c " + quote(script)).c_str());
    std::vector<Result> results;
    for (int node : {0, 1}) {
      const std::string name = path("node" + std::to_string(node));
      Result r;
      const std::string rc = read_file(name + ".rc");
      r.exit_code = rc.empty() ? -1 : std::stoi(rc);
      r.out = read_file(name + ".out");
      r.err = read_file(name + ".err");
      results.push_back(r);
    }
    return results;
  }

  std::string path(const std::string& name) const { return files::join(dir_, name); }

  // 96 synthetic images, global batches of 16: 6 steps an epoch, a state saved every 2.
  static std::vector<std::string> tiny(const std::string& save, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {
        "--dataset", "synthetic", "--synthetic-samples", "96", "--image-size", "16", "--model", "custom",
        "--patch-size", "8", "--embed-dim", "16", "--depth", "2", "--heads", "2", "--batch-size", "16",
        "--threads", "1", "--log-every", "1", "--eval-batch-size", "32", "--epochs", "4", "--save", save,
        "--checkpoint-every", "2", "--resume", "auto"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }

  std::string dir_;
};

// Two crashes (ranks 1 and 0, after steps 3 and 5) and a hang (rank 1 after step 9, which its peer's
// collective timeout catches): four attempts, each resuming from the state of the step before.
TEST_F(TrainVitRestart, CrashesAndAHangUnderMaxRestartsEndWithTheUninterruptedRunsWeights) {
  const std::vector<std::string> colo_run = {kColoRun, "--nproc-per-node", "2", "--max-restarts", "3",
                                             "--grace-period", "1"};
  const Result faulty = run(colo_run, tiny(path("faulty"), {"--max-steps", "12"}),
                            "COLO_TIMEOUT_MS=4000 COLO_FAULT='rank=1,step=3,kind=crash;rank=0,step=5,kind=crash,"
                            "restart=1;rank=1,step=9,kind=hang,restart=2'");
  ASSERT_EQ(faulty.exit_code, 0) << faulty.out << faulty.err;
  EXPECT_CONTAINS(faulty.err, "[rank 1] colo: COLO_FAULT: injected crash on rank 1 after step 3 (restart 0)");
  EXPECT_CONTAINS(faulty.err, "[rank 0] colo: COLO_FAULT: injected crash on rank 0 after step 5 (restart 1)");
  EXPECT_CONTAINS(faulty.err, "[rank 1] colo: COLO_FAULT: injected hang on rank 1 after step 9 (restart 2)");
  EXPECT_CONTAINS(faulty.err, "colo-run: restart 3 of 3 (COLO_RESTART_COUNT=3)");
  EXPECT_CONTAINS(faulty.err, "was killed by signal 9 (SIGKILL)");
  // Each restart continued from the state saved before its failure.
  EXPECT_CONTAINS(faulty.out, "step-00000002: epoch 1, step 2");
  EXPECT_CONTAINS(faulty.out, "step-00000004: epoch 1, step 4");
  EXPECT_CONTAINS(faulty.out, "step-00000008: epoch 2, step 8");

  const Result clean = run({kColoRun, "--nproc-per-node", "2"}, tiny(path("clean"), {"--max-steps", "12"}));
  ASSERT_EQ(clean.exit_code, 0) << clean.out << clean.err;
  EXPECT_LACKS(clean.out, "resumed from");
  const std::string faulty_weights = read_file(files::join(path("faulty"), "step-00000012", "model.safetensors"));
  const std::string clean_weights = read_file(files::join(path("clean"), "step-00000012", "model.safetensors"));
  ASSERT_FALSE(clean_weights.empty());
  EXPECT_TRUE(faulty_weights == clean_weights) << "the weights after the restarts differ from the uninterrupted run's";
}

// The same on two nodes (two colo-run over loopback, one rank each): rank 1's crash on node 1 stops
// node 0's rank at once, rank 0's hang on node 0 is caught by node 1's collective timeout, and both
// nodes start every attempt together; the run ends with the uninterrupted run's weights.
TEST_F(TrainVitRestart, TwoNodesRestartTogetherAndEndWithTheUninterruptedRunsWeights) {
  const std::vector<std::string> nodes = {"--nproc-per-node", "1", "--max-restarts", "2", "--grace-period", "1",
                                          "--master-addr", "127.0.0.1", "--master-port", std::to_string(free_port()),
                                          "--control-port", std::to_string(free_port())};
  const auto faulty = run_nodes(nodes, tiny(path("faulty"), {"--max-steps", "10"}),
                                "COLO_TIMEOUT_MS=4000 COLO_FAULT='rank=1,step=3,kind=crash;rank=0,step=7,kind=hang,restart=1'");
  ASSERT_EQ(faulty[0].exit_code, 0) << faulty[0].out << faulty[0].err;
  ASSERT_EQ(faulty[1].exit_code, 0) << faulty[1].out << faulty[1].err;
  EXPECT_CONTAINS(faulty[1].err, "[rank 1] colo: COLO_FAULT: injected crash on rank 1 after step 3 (restart 0)");
  EXPECT_CONTAINS(faulty[0].err, "colo-run: node 1: rank 1 (pid ");
  EXPECT_CONTAINS(faulty[0].err, "[rank 0] colo: COLO_FAULT: injected hang on rank 0 after step 7 (restart 1)");
  for (const auto& node : faulty) {
    EXPECT_CONTAINS(node.err, "colo-run: restart 2 of 2 (COLO_RESTART_COUNT=2): starting this node's ranks again, "
                              "with every node's");
  }
  EXPECT_CONTAINS(faulty[0].out, "step-00000002: epoch 1, step 2");
  EXPECT_CONTAINS(faulty[0].out, "step-00000006: epoch 1, step 6");

  const Result clean = run({kColoRun, "--nproc-per-node", "2"}, tiny(path("clean"), {"--max-steps", "10"}));
  ASSERT_EQ(clean.exit_code, 0) << clean.out << clean.err;
  const std::string faulty_weights = read_file(files::join(path("faulty"), "step-00000010", "model.safetensors"));
  const std::string clean_weights = read_file(files::join(path("clean"), "step-00000010", "model.safetensors"));
  ASSERT_FALSE(clean_weights.empty());
  EXPECT_TRUE(faulty_weights == clean_weights) << "the weights after the restarts differ from the uninterrupted run's";
}

TEST_F(TrainVitRestart, ResumeAutoStartsFreshThenContinuesItsOwnRunAndRefusesAnothers) {
  const std::string ckpt = path("ckpt");  // does not exist yet
  Result first = run({}, tiny(ckpt, {"--max-steps", "4"}));
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  EXPECT_LACKS(first.out, "resumed from");
  EXPECT_CONTAINS(first.out, "trained 4 steps");

  // The same command line with a longer run continues the saved one.
  Result again = run({}, tiny(ckpt, {"--max-steps", "6"}));
  ASSERT_EQ(again.exit_code, 0) << again.out << again.err;
  EXPECT_CONTAINS(again.out, "resumed from " + ckpt + "/step-00000004: epoch 1, step 4");
  EXPECT_CONTAINS(again.out, "trained 2 steps");

  // Another run's state (another seed) is not continued behind the user's back, nor replaced.
  Result other = run({}, tiny(ckpt, {"--max-steps", "6", "--seed", "7"}));
  EXPECT_EQ(other.exit_code, 2) << other.out << other.err;
  EXPECT_CONTAINS(other.err, "--resume auto: --save " + ckpt + " holds the state of another run");
  EXPECT_CONTAINS(other.err, "seed 7 (saved: 42)");
  EXPECT_CONTAINS(other.err, "Continue that run on purpose with --resume " + ckpt + ", replace its states with "
                             "--overwrite, or save into another directory");
  EXPECT_TRUE(files::exists(files::join(ckpt, "step-00000006", "model.safetensors")));
  // With --overwrite it starts fresh and replaces them.
  Result replaced = run({}, tiny(ckpt, {"--max-steps", "2", "--seed", "7", "--overwrite"}));
  ASSERT_EQ(replaced.exit_code, 0) << replaced.out << replaced.err;
  EXPECT_LACKS(replaced.out, "resumed from");
  EXPECT_FALSE(files::exists(files::join(ckpt, "step-00000006")));
  EXPECT_TRUE(files::exists(files::join(ckpt, "step-00000002", "model.safetensors")));
}

TEST_F(TrainVitRestart, ResumeAutoAndCheckpointEveryNeedSave) {
  Result r = run({}, {"--resume", "auto", "--checkpoint-every", "-1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_CONTAINS(r.err, "--resume auto continues the state this run saves: give --save DIR");
  EXPECT_CONTAINS(r.err, "--checkpoint-every -1: must be >= 0");
  r = run({}, {"--checkpoint-every", "5"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_CONTAINS(r.err, "--checkpoint-every says how often --save saves: give --save DIR");
}

// Issue 36's elastic target at CI size: a run that loses a rank (rank 3 crashes after step 3, then
// its slot cannot start) goes on with fewer ranks under colo-run --elastic, keeps the global batch
// by accumulating more, and its per-step losses stay within 1e-5 (fp32) of the uninterrupted
// run's. gemini dp 4 -> dp 3 (24 = 3 x 2 passes of 4; its sharded state re-split over 3 ranks);
// hybrid_parallel tp 2 x dp 2 -> 3 ranks, which tp 2 does not divide (refused: colo-run tries 2)
// -> tp 2 x dp 1 with 2 passes.
TEST_F(TrainVitRestart, AnElasticRunThatLosesARankGoesOnWithFewerRanksAndTheSameLosses) {
  struct Case {
    std::string batch;
    std::vector<std::string> plugin;
    std::vector<std::string> said;
  };
  const std::vector<Case> cases = {
      {"24",
       {"--plugin", "gemini"},
       {"elastic: 3 of 4 ranks: data-parallel 3 instead of 4; gradient accumulation 2 instead of 1 keeps the global "
        "batch 24 (4 images per rank per pass, planned 6)"}},
      {"16",
       {"--plugin", "hybrid_parallel", "--plugin-opt", "tp_size=2"},
       {"colo-run: elastic: the program cannot run on 3 ranks (rank ", "world size 3 is not divisible by",
        "elastic: 2 of 4 ranks: data-parallel 1 instead of 2; gradient accumulation 2 instead of 1 keeps the global "
        "batch 16 (8 images per rank per pass, planned 8)"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.plugin[1]);
    auto args = [&](const std::string& name) {
      auto all = tiny(path(name), c.plugin);
      all.insert(all.end(), {"--metrics", path(name + ".jsonl")});
      // Two epochs of tiny()'s data at this case's batch.
      *(std::find(all.begin(), all.end(), "--batch-size") + 1) = c.batch;
      *(std::find(all.begin(), all.end(), "--epochs") + 1) = "2";
      return all;
    };
    const Result elastic =
        run({kColoRun, "--elastic", "2:4", "--max-restarts", "4", "--grace-period", "1"}, args("elastic"),
            "COLO_TIMEOUT_MS=10000 COLO_FAULT='rank=3,step=3,kind=crash;rank=3,kind=nostart,restart=1'");
    ASSERT_EQ(elastic.exit_code, 0) << elastic.out << elastic.err;
    EXPECT_CONTAINS(elastic.err, "colo-run: elastic: leaving out slot 3 (GPU 3) from now on: local rank 3 could not "
                                 "start: COLO_FAULT's nostart fault on rank 3");
    for (const auto& line : c.said) EXPECT_CONTAINS(elastic.out + elastic.err, line);
    EXPECT_CONTAINS(elastic.out, "resumed from");
    // The Booster's warning about the other world, with colo-run's rank prefix only.
    EXPECT_CONTAINS(elastic.err, "[rank 0] WARN ");
    EXPECT_LACKS(elastic.err, "[rank 0] [rank 0]");
    const Result clean = run({kColoRun, "--nproc-per-node", "4"}, args("clean"));
    ASSERT_EQ(clean.exit_code, 0) << clean.out << clean.err;
    const auto expected = metrics_records::train_field(path("clean.jsonl"), "loss");
    const auto got = metrics_records::train_field(path("elastic.jsonl"), "loss");
    ASSERT_EQ(expected.size(), static_cast<std::size_t>(2 * 96 / std::stoi(c.batch)));  // two epochs of 96 images
    ASSERT_EQ(got.size(), expected.size());
    for (const auto& [step, loss] : expected) EXPECT_NEAR(got.at(step), loss, 1e-5) << "step " << step;
    files::remove_all(path("elastic"));
    files::remove_all(path("clean"));
  }
}

// The elastic target across nodes: two colo-run nodes of 2 ranks (dp 4) under --elastic 2:2; rank 3
// (node 1) crashes after step 3, then cannot start, so node 1 has fewer than MIN slots: node 0's
// colo-run leaves the node out and the run goes on as dp 2 on node 0, keeping the global batch by
// accumulating 2 passes; its per-step losses stay within 1e-5 (fp32) of an uninterrupted dp 4 run's.
TEST_F(TrainVitRestart, AnElasticRunOfTwoNodesGoesOnWithoutANodeAndTheSameLosses) {
  const std::vector<std::string> nodes = {"--elastic", "2:2", "--max-restarts", "3", "--grace-period", "1",
                                          "--master-addr", "127.0.0.1", "--master-port", std::to_string(free_port()),
                                          "--control-port", std::to_string(free_port())};
  auto args = [&](const std::string& name) {
    auto all = tiny(path(name), {"--metrics", path(name + ".jsonl")});
    *(std::find(all.begin(), all.end(), "--epochs") + 1) = "2";
    return all;
  };
  const auto elastic = run_nodes(nodes, args("elastic"),
                                 "COLO_TIMEOUT_MS=10000 COLO_FAULT='rank=3,step=3,kind=crash;rank=3,kind=nostart,restart=1'");
  ASSERT_EQ(elastic[0].exit_code, 0) << elastic[0].out << elastic[0].err;
  EXPECT_EQ(elastic[1].exit_code, 0) << elastic[1].out << elastic[1].err;
  EXPECT_CONTAINS(elastic[1].err, "[rank 3] colo: COLO_FAULT: injected crash on rank 3 after step 3 (restart 0)");
  const std::string left = "elastic: leaving out node 1 from now on: it can start only 1 of its slots, fewer than "
                           "--elastic's MIN 2";
  EXPECT_CONTAINS(elastic[0].err, "colo-run: " + left);
  EXPECT_CONTAINS(elastic[1].err, left);
  EXPECT_CONTAINS(elastic[0].err, "colo-run: elastic: attempt 2 runs 2 ranks: node 0 2");
  EXPECT_CONTAINS(elastic[0].out + elastic[0].err, "gradient accumulation 2 instead of 1 keeps the global batch 16");
  EXPECT_CONTAINS(elastic[0].out, "resumed from");
  const Result clean = run({kColoRun, "--nproc-per-node", "4"}, args("clean"));
  ASSERT_EQ(clean.exit_code, 0) << clean.out << clean.err;
  const auto expected = metrics_records::train_field(path("clean.jsonl"), "loss");
  const auto got = metrics_records::train_field(path("elastic.jsonl"), "loss");
  ASSERT_EQ(expected.size(), 12u);  // two epochs of 96 images at 16
  ASSERT_EQ(got.size(), expected.size());
  for (const auto& [step, loss] : expected) EXPECT_NEAR(got.at(step), loss, 1e-5) << "step " << step;
}

// --layout auto --resume auto: the run record holds the command line's accumulation, not the
// plan's, so a restart that plans the same layout again continues its own run. The fixture's
// cluster (tests/unit/planner_fixtures) with 0.04 GiB per rank makes the plan accumulate 2 passes.
TEST_F(TrainVitRestart, ResumeAutoUnderLayoutAutoContinuesItsOwnRunWhenThePlanAccumulates) {
  std::string cluster = read_file(std::string(COLO_SOURCE_DIR) + "/tests/unit/planner_fixtures/cluster.json");
  const auto at = cluster.find("\"memory_gib\": 4");
  ASSERT_NE(at, std::string::npos);
  cluster.replace(at, std::string("\"memory_gib\": 4").size(), "\"memory_gib\": 0.04");
  std::ofstream(path("small.json")) << cluster;
  auto args = [&](const std::string& steps) {
    return std::vector<std::string>{
        "--layout", "auto", "--layout-cluster", path("small.json"), "--layout-profile",
        std::string(COLO_SOURCE_DIR) + "/tests/unit/planner_fixtures/profile.json", "--dataset", "synthetic",
        "--synthetic-samples", "512", "--model", "custom", "--image-size", "32", "--patch-size", "8", "--embed-dim",
        "64", "--depth", "5", "--heads", "4", "--mlp-ratio", "2", "--batch-size", "256", "--threads", "1", "--epochs",
        "2", "--save", path("ckpt"), "--checkpoint-every", "1", "--resume", "auto", "--max-steps", steps};
  };
  const Result first = run({}, args("1"));
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  EXPECT_CONTAINS(first.out + first.err, "torch_ddp dp1 accum2");
  const Result again = run({}, args("2"));
  ASSERT_EQ(again.exit_code, 0) << again.out << again.err;
  EXPECT_CONTAINS(again.out, "resumed from");
  EXPECT_CONTAINS(again.out, "step-00000001");
}

// A fault that fires before the rendezvous (nostart) fails the job's first attempt; the restart
// starts well; a bad COLO_FAULT is refused by name before the job forms.
TEST_F(TrainVitRestart, ARankThatFailsToStartIsRestartedAndABadFaultIsRefused) {
  const std::vector<std::string> colo_run = {kColoRun, "--nproc-per-node", "2", "--max-restarts", "1"};
  Result r = run(colo_run, tiny(path("ckpt"), {"--max-steps", "2"}), "COLO_FAULT='rank=1,kind=nostart'");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_CONTAINS(r.err, "[rank 1] colo: COLO_FAULT: injected nostart on rank 1 before the rendezvous (restart 0)");
  EXPECT_CONTAINS(r.err, "exited with code 3");
  EXPECT_EQ(count_of(r.err, "colo-run: restart "), 1u) << r.err;
  r = run({kColoRun, "--nproc-per-node", "2", "--max-restarts", "2"}, tiny(path("ckpt2"), {"--max-steps", "2"}),
          "COLO_FAULT='rank=1,kind=boom'");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_CONTAINS(r.err, "environment variable COLO_FAULT: fault 'rank=1,kind=boom': kind='boom' is none of crash, "
                         "hang, nostart");
}

}  // namespace
