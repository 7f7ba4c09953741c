// colo-run --max-restarts, as a black box: a failed job is started again up to N times (one
// restart more fails with the last failure's status and says the restarts are spent), each
// attempt sees its COLO_RESTART_COUNT, its own store file and its own job token, a process left
// from an earlier attempt is not admitted into a later one, and what is not a rank's failure (a
// usage error, colo-run's own interruption) is not restarted.
#include <colo/files/files.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace files = colo::files;

const std::string kColoRun = COLO_BINARY_DIR "/bin/colo-run";
const std::string kProbe = COLO_BINARY_DIR "/bin/colo_job_probe";

#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "expected \"" << (part) << "\" in:\n" << (text)
#define EXPECT_LACKS(text, part) \
  EXPECT_EQ(std::string(text).find(part), std::string::npos) << "did not expect \"" << (part) << "\" in:\n" << (text)

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string quote(const std::string& arg) {
  std::string quoted = "'";
  for (char c : arg) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

size_t count_of(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
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
// boundary) still end well, on the third attempt; three do not (next test).
TEST_F(ColoRunRestart, AFailedJobStartsAgainWithItsRestartCountAStoreAndATokenOfItsOwn) {
  const Result r = run({"--max-restarts", "2", "--nproc-per-node", "2", "sh", "-c",
                        "echo \"attempt $COLO_RESTART_COUNT $COLO_RDZV_FILE $(echo $COLO_JOB_TOKEN | cksum)\"; "
                        "if [ $RANK = 1 ] && [ $COLO_RESTART_COUNT -lt 2 ]; then exit 3; fi"},
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
  Result r = run({"--max-restarts", "3", "--nproc-per-node", "2", "sh", "-c",
                  "echo \"attempt $COLO_RESTART_COUNT\"; if [ $RANK = 1 ]; then exit 2; fi; sleep 30"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(count_of(r.out, "attempt "), 2u) << r.out;
  EXPECT_CONTAINS(r.err, "colo-run: not restarting: a rank exited with status 2, a usage error");
  // SIGINT to colo-run (the ranks' parent) is a person stopping the job.
  r = run({"--max-restarts", "3", "--nproc-per-node", "2", "sh", "-c",
           "echo \"attempt $COLO_RESTART_COUNT\"; if [ $RANK = 1 ]; then kill -INT $PPID; fi; sleep 30"});
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
  const Result nodes = run({"--max-restarts", "1", "--nnodes", "2", "--master-port", "29999", "true"},
                           "COLO_JOB_TOKEN=" + std::string(64, 'a'));
  EXPECT_EQ(nodes.exit_code, 2);
  EXPECT_CONTAINS(nodes.err, "--max-restarts with --nnodes > 1 is not implemented yet");
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
