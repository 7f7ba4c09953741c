// colo-run --max-restarts, as a black box: a failed job is started again up to N times (one
// restart more fails with the last failure's status and says the restarts are spent), each
// attempt sees its COLO_RESTART_COUNT, its own store file and its own job token, a process left
// from an earlier attempt is not admitted into a later one, and what is not a rank's failure (a
// usage error, colo-run's own interruption) is not restarted.
#include <colo/files/files.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "command_output.h"

namespace {

using command_output::read_file;
using command_output::quote;
using command_output::count_of;

namespace files = colo::files;

const std::string kColoRun = COLO_BINARY_DIR "/bin/colo-run";
const std::string kProbe = COLO_BINARY_DIR "/bin/colo_job_probe";

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

struct Result {
  int exit_code = -1;
  std::string out, err;
};

class ColoRunRestart : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = files::make_temp_directory("colo_run_restart_"); }
  void TearDown() override {
    if (!dir_.empty()) files::remove_all(dir_);
  }

  // colo-run with `args`, bounded by 60 s (a job that restarts for ever fails the test, not CI).
  Result run(const std::vector<std::string>& args, const std::string& env = "") const {
    std::string command = "env -u COLO_RESTART_COUNT -u COLO_FAULT " + env + " timeout 60 " + quote(kColoRun);
    for (const auto& arg : args) command += " " + quote(arg);
    command += " >" + quote(path("out")) + " 2>" + quote(path("err"));
    const int status = std::system(command.c_str());
    Result result;
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    result.out = read_file(path("out"));
    result.err = read_file(path("err"));
    return result;
  }
  std::string path(const std::string& name) const { return files::join(dir_, name); }

  std::string dir_;
};

// Rank 1 fails in the first `failures` attempts: with --max-restarts 2, two failures (the
// boundary) still end well, on the third attempt; three do not (next test). Rank 1 fails only
// once rank 0 has spoken (a file rank 0 leaves): otherwise colo-run may stop rank 0 first.
TEST_F(ColoRunRestart, AFailedJobStartsAgainWithItsRestartCountAStoreAndATokenOfItsOwn) {
  const std::string spoke = path("spoke_");
  const Result r = run({"--max-restarts", "2", "--nproc-per-node", "2", "sh", "-c",
                        "echo \"attempt $COLO_RESTART_COUNT $COLO_RDZV_FILE $(echo $COLO_JOB_TOKEN | cksum)\"; "
                        "if [ $RANK = 0 ]; then touch " + spoke + "$COLO_RESTART_COUNT; fi; "
                        "if [ $RANK = 1 ] && [ $COLO_RESTART_COUNT -lt 2 ]; then i=0; "
                        "while [ ! -f " + spoke + "$COLO_RESTART_COUNT ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; "
                        "exit 3; fi"},
                       "COLO_RESTART_COUNT=7");  // an inherited count is colo-run's to set
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::set<std::string> stores, tokens;
  for (const char* attempt : {"0", "1", "2"}) {
    std::set<std::string> seen;  // one store and one token per attempt, the same on both ranks
    for (const auto& line : lines_of(r.out)) {
      std::istringstream fields(line);
      std::string tag, rank, word, count, store, token;
      fields >> tag >> rank >> word >> count >> store >> token;
      if (count != attempt) continue;
      seen.insert(store + " " + token);
      stores.insert(store);
      tokens.insert(token);
    }
    EXPECT_EQ(seen.size(), 1u) << "attempt " << attempt << ":\n" << r.out;
  }
  EXPECT_EQ(stores.size(), 3u) << r.out;
  EXPECT_EQ(tokens.size(), 3u) << r.out;
  EXPECT_EQ(count_of(r.out, "attempt "), 6u) << r.out;
  EXPECT_CONTAINS(r.err, "colo-run: restart 1 of 2 (COLO_RESTART_COUNT=1): starting every rank again after");
  EXPECT_CONTAINS(r.err, "because rank 1 (pid ");
  EXPECT_CONTAINS(r.err, "colo-run: restart 2 of 2 (COLO_RESTART_COUNT=2)");
  EXPECT_LACKS(r.err, "restart 3");
  for (const auto& store : stores) EXPECT_FALSE(files::exists(files::parent_path(store))) << store << " left behind";
}

TEST_F(ColoRunRestart, WhenTheRestartsAreSpentTheLastFailureEndsTheJobAndSaysSo) {
  const Result r = run({"--max-restarts", "2", "--nproc-per-node", "2", "sh", "-c",
                        "echo \"attempt $COLO_RESTART_COUNT\"; if [ $RANK = 0 ]; then exit $((5 + COLO_RESTART_COUNT)); fi; "
                        "sleep 30"});
  EXPECT_EQ(r.exit_code, 7) << "the last failure's status\n" << r.err;
  // Rank 0 fails at once: rank 1 may be stopped before it says anything.
  EXPECT_EQ(count_of(r.out, "[rank 0] attempt "), 3u) << r.out;
  EXPECT_CONTAINS(r.err, "restart 2 of 2");
  EXPECT_CONTAINS(r.err,
                  "colo-run: the job failed and its restarts are spent (--max-restarts 2: 3 attempts in all); the last "
                  "failure, after ");
  EXPECT_CONTAINS(r.err, "rank 0 (pid ");
  EXPECT_CONTAINS(r.err, "exited with code 7");
}

TEST_F(ColoRunRestart, WithoutMaxRestartsAFailedJobEndsAtOnceAndTheCountIsZero) {
  const Result r = run({"--nproc-per-node", "2", "sh", "-c", "echo \"attempt $COLO_RESTART_COUNT\"; exit 4"},
                       "COLO_RESTART_COUNT=3");
  EXPECT_EQ(r.exit_code, 4) << r.err;
  // Either rank may be stopped before it says anything, once the other failed.
  EXPECT_NE(count_of(r.out, "] attempt 0"), 0u) << r.out;
  EXPECT_LACKS(r.out, "attempt 1");
  EXPECT_LACKS(r.out, "attempt 3");
  EXPECT_LACKS(r.err, "restart");
}

TEST_F(ColoRunRestart, AUsageErrorOrColoRunsOwnInterruptionIsNotRestarted) {
  // Rank 1 acts only once rank 0 has said its line (a file it leaves), or that line could be cut
  // off by the stop that rank 1's exit brings (CI saw it once).
  const std::string said = quote(path("said"));
  const std::string rank1_waits = "echo \"attempt $COLO_RESTART_COUNT\"; if [ $RANK = 0 ]; then touch " +
                                  said + "; sleep 30; fi; i=0; while [ ! -e " + said +
                                  " ] && [ $i -lt 500 ]; do sleep 0.02; i=$((i+1)); done; ";
  Result r = run({"--max-restarts", "3", "--nproc-per-node", "2", "sh", "-c", rank1_waits + "exit 2"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(count_of(r.out, "attempt "), 2u) << r.out;
  EXPECT_CONTAINS(r.err, "colo-run: not restarting: a rank exited with status 2, a usage error");
  // SIGINT to colo-run (the ranks' parent) is a person stopping the job.
  std::remove(path("said").c_str());
  r = run({"--max-restarts", "3", "--nproc-per-node", "2", "sh", "-c", rank1_waits + "kill -INT $PPID; sleep 30"});
  EXPECT_EQ(r.exit_code, 130) << r.err;
  EXPECT_EQ(count_of(r.out, "attempt "), 2u) << r.out;
  EXPECT_LACKS(r.err, "restart 1");
}

TEST_F(ColoRunRestart, BadMaxRestartsIsRefused) {
  for (const char* bad : {"-1", "10001"}) {
    const Result r = run({"--max-restarts", bad, "true"});
    EXPECT_EQ(r.exit_code, 2) << bad;
    EXPECT_CONTAINS(r.err, std::string("--max-restarts must be in 0..10000 (got ") + bad + ")");
  }
  EXPECT_EQ(run({"--max-restarts", "10000", "true"}).exit_code, 0);
}

// --control-port (node 0's colo-run meeting the others', dist_job_test.cpp) belongs to a job of
// several nodes that may restart, and may not be the store's port; 65535 is a port (the boundary).
TEST_F(ColoRunRestart, BadControlPortIsRefused) {
  const std::string token = "COLO_JOB_TOKEN=" + std::string(64, 'a');
  const std::vector<std::string> nodes = {"--max-restarts", "1", "--nnodes", "2", "--master-port", "29999"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = nodes;
    args.insert(args.end(), extra.begin(), extra.end());
    args.push_back("true");
    return args;
  };
  Result r = run({"--control-port", "30000", "true"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_CONTAINS(r.err, "--control-port is for a job of several nodes that may restart");
  r = run(with({"--control-port", "29999"}), token);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_CONTAINS(r.err, "--control-port 29999 is --master-port's too");
  for (const char* bad : {"0", "65536"}) {
    r = run(with({"--control-port", bad}), token);
    EXPECT_EQ(r.exit_code, 2) << bad;
    EXPECT_CONTAINS(r.err, std::string("--control-port must be in 1..65535 (got ") + bad + ")");
  }
  r = run({"--max-restarts", "1", "--nnodes", "2", "--master-port", "65535", "true"}, token);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_CONTAINS(r.err, "--master-port 65535 leaves no port above it for node 0's colo-run: give --control-port");
  // 65535 itself is taken: node 0 waits (COLO_TIMEOUT_MS) for node 1, which never comes, and says so.
  r = run(with({"--control-port", "65535"}), token + " COLO_TIMEOUT_MS=300");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_CONTAINS(r.err, "node(s) 1 did not connect to node 0's colo-run at 127.0.0.1:65535 within the job's timeout");
}

// --elastic 2:4: the slot whose rank could not start (its cannot-start note, colo/env/elastic.h) is
// left out for good, the remaining GPUs renumbered through the inherited CUDA_VISIBLE_DEVICES; a
// world the program refuses (its world-size-unusable note, with a usage error's status) sends
// colo-run to the next smaller one; every attempt is told the planned world.
TEST_F(ColoRunRestart, ElasticLeavesOutASlotThatCannotStartAndTriesSmallerWorldsTheProgramRefuses) {
  const std::string script =
      "echo \"attempt $COLO_RESTART_COUNT rank $RANK/$WORLD_SIZE local $LOCAL_RANK/$LOCAL_WORLD_SIZE planned "
      "$COLO_ELASTIC_MAX_WORLD devices $CUDA_VISIBLE_DEVICES\"; "
      "if [ $COLO_RESTART_COUNT = 0 ]; then "
      "  if [ $RANK = 1 ]; then echo 'GPU 5 is gone' >$COLO_RUN_REPORTS/cannot-start.1; exit 3; fi; sleep 30; fi; "
      "if [ $WORLD_SIZE = 3 ]; then echo 'tp 2 does not divide 3' >$COLO_RUN_REPORTS/world-size-unusable.$RANK; "
      "exit 2; fi; sleep 0.2";
  const Result r = run({"--elastic", "2:4", "--max-restarts", "2", "sh", "-c", script}, "CUDA_VISIBLE_DEVICES=4,5,6,7");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_CONTAINS(r.err, "colo-run: elastic: leaving out slot 1 (GPU 5) from now on: local rank 1 could not start: "
                         "GPU 5 is gone");
  EXPECT_CONTAINS(r.err, "colo-run: restart 1 of 2 (COLO_RESTART_COUNT=1): starting 3 of 4 ranks "
                         "(CUDA_VISIBLE_DEVICES=4,6,7) again");
  EXPECT_CONTAINS(r.err, "colo-run: elastic: the program cannot run on 3 ranks (rank ");
  EXPECT_CONTAINS(r.err, "tp 2 does not divide 3)");
  EXPECT_CONTAINS(r.err, "colo-run: restart 2 of 2 (COLO_RESTART_COUNT=2): starting 2 of 4 ranks "
                         "(CUDA_VISIBLE_DEVICES=4,6) again");
  EXPECT_CONTAINS(r.out, "[rank 0] attempt 2 rank 0/2 local 0/2 planned 4 devices 4,6");
  EXPECT_CONTAINS(r.out, "[rank 1] attempt 2 rank 1/2 local 1/2 planned 4 devices 4,6");
  EXPECT_EQ(count_of(r.out, "attempt 2 "), 2u) << r.out;
  // Without an inherited list the slots' own numbers stand for their GPUs; a note is read only
  // under --elastic (a plain restart starts every rank again).
  const Result own = run({"--elastic", "1:3", "--max-restarts", "1", "sh", "-c",
                          "echo \"attempt $COLO_RESTART_COUNT $WORLD_SIZE devices ${CUDA_VISIBLE_DEVICES-unset}\"; "
                          "if [ $COLO_RESTART_COUNT = 0 ]; then if [ $RANK = 0 ]; then echo no "
                          ">$COLO_RUN_REPORTS/cannot-start.0; exit 3; fi; sleep 30; fi"},
                         "-u CUDA_VISIBLE_DEVICES");
  ASSERT_EQ(own.exit_code, 0) << own.out << own.err;
  EXPECT_CONTAINS(own.out, "[rank 1] attempt 1 2 devices 1,2");
  const Result plain = run({"--nproc-per-node", "2", "--max-restarts", "1", "sh", "-c",
                            "echo \"attempt $COLO_RESTART_COUNT $WORLD_SIZE ${COLO_ELASTIC_MAX_WORLD-none}\"; "
                            "if [ $COLO_RESTART_COUNT = 0 ]; then if [ $RANK = 0 ]; then echo no "
                            ">$COLO_RUN_REPORTS/cannot-start.0; exit 3; fi; sleep 30; fi"},
                           "COLO_ELASTIC_MAX_WORLD=9");
  ASSERT_EQ(plain.exit_code, 0) << plain.out << plain.err;
  EXPECT_CONTAINS(plain.out, "[rank 1] attempt 1 2 none");
  EXPECT_LACKS(plain.err, "elastic");
}

// Below MIN the job stops and says why: too few slots can start, or the program refuses every
// world from MIN up.
TEST_F(ColoRunRestart, ElasticStopsBelowItsMinimumAndSaysWhy) {
  const Result slots = run({"--elastic", "3:4", "--max-restarts", "5", "sh", "-c",
                            "if [ $RANK -ge 2 ]; then echo dead >$COLO_RUN_REPORTS/cannot-start.$RANK; exit 3; fi; "
                            "sleep 30"});
  EXPECT_EQ(slots.exit_code, 3) << slots.err;
  EXPECT_CONTAINS(slots.err, "colo-run: elastic: stopping: only 2 of the node's 4 slots can start, fewer than "
                             "--elastic's MIN 3");
  const Result worlds = run({"--elastic", "3:4", "--max-restarts", "5", "sh", "-c",
                             "if [ $WORLD_SIZE != 2 ]; then echo \"no $WORLD_SIZE\" "
                             ">$COLO_RUN_REPORTS/world-size-unusable.$RANK; exit 2; fi"});
  EXPECT_EQ(worlds.exit_code, 2) << worlds.err;
  EXPECT_CONTAINS(worlds.err, "colo-run: elastic: the program cannot run on 4 ranks");
  EXPECT_CONTAINS(worlds.err, "colo-run: restart 1 of 5 (COLO_RESTART_COUNT=1): starting 3 of 4 ranks again");
  EXPECT_CONTAINS(worlds.err, "colo-run: elastic: stopping: the program cannot use more than 2 ranks here, fewer "
                              "than --elastic's MIN 3");
  EXPECT_LACKS(worlds.err, "restart 2");
}

TEST_F(ColoRunRestart, BadElasticIsRefused) {
  for (const char* bad : {"3:2", "0:2", "2", "a:4", "2:", ":4", "2:4:6", "-1:4"}) {
    const Result r = run({"--elastic", bad, "--max-restarts", "1", "true"});
    EXPECT_EQ(r.exit_code, 2) << bad;
    EXPECT_CONTAINS(r.err, std::string("--elastic '") + bad + "': the form is MIN:MAX");
  }
  Result r = run({"--elastic", "2:4", "--nproc-per-node", "3", "--max-restarts", "1", "true"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_CONTAINS(r.err, "--nproc-per-node 3 and --elastic 2:4: an elastic job starts MAX ranks");
  EXPECT_EQ(run({"--elastic", "2:2", "--nproc-per-node", "2", "--max-restarts", "1", "true"}).exit_code, 0);
  r = run({"--elastic", "1:2", "true"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_CONTAINS(r.err, "--elastic changes the world only when the job starts again: add --max-restarts N");
}

// A rank of the first attempt escapes colo-run's stop (setsid) and, once the job has restarted,
// tries to join it as rank 1 through the same TCP store port: with the first attempt's token it
// is refused, and the second attempt's own rank 1 joins.
TEST_F(ColoRunRestart, AProcessLeftFromAnEarlierAttemptIsNotAdmitted) {
  if (!files::exists(kProbe)) GTEST_SKIP() << kProbe << " is not built";
  const std::string stale = path("stale.txt");
  const std::string escaped = path("escaped");
  // Rank 1 fails only once its stale copy has left colo-run's process group (setsid).
  const std::string script =
      "if [ $COLO_RESTART_COUNT = 0 ]; then "
      "  if [ $RANK = 1 ]; then "
      "    setsid sh -c 'touch " + escaped + "; sleep 1; exec " + kProbe + " join' >" + stale + " 2>&1 </dev/null & "
      "    while [ ! -e " + escaped + " ]; do sleep 0.05; done; exit 3; "
      "  fi; "
      "  sleep 30; "
      "fi; "
      "if [ $RANK = 1 ]; then sleep 4; fi; exec " + kProbe + " join";
  const Result r = run({"--max-restarts", "1", "--nproc-per-node", "2", "--rdzv-file", "none", "--master-port",
                        std::to_string(20000 + ::getpid() % 20000), "sh", "-c", script},
                       "COLO_TIMEOUT_MS=20000 OMP_NUM_THREADS=1");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err << "\nstale process:\n" << read_file(stale);
  EXPECT_CONTAINS(r.err, "colo: rank 0: refused a process that asked to join this job as rank 1: its job token is "
                         "not this job's");
  EXPECT_CONTAINS(r.out, "[rank 0] rank 0 admitted; all_reduce ok");
  EXPECT_CONTAINS(r.out, "[rank 1] rank 1 admitted; all_reduce ok");
}

}  // namespace
