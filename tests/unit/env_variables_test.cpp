// colo::env, the one reader of the environment variables colo reads, and what goes through it:
// the launcher variables (dist::Environment), COLO_TIMEOUT_MS, COLO_JOB_TOKEN, and how train_vit
// reports a bad one.
#include <colo/dist/environment.h>
#include <colo/dist/process_group.h>
#include <colo/env/variables.h>

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <climits>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "error_of.h"
#include "scoped_env.h"
#include "temporary_directory.h"

namespace colo {
namespace {

using testing::error_of;

env::Lookup lookup_of(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

std::optional<long long> integer(const std::string& value, long long min, long long max) {
  return env::integer("COLO_X", min, max, "things", lookup_of({{"COLO_X", value}}));
}

TEST(EnvVariables, IntegersAreWholeStringsInRange) {
  EXPECT_EQ(integer("1", 1, 10), 1);
  EXPECT_EQ(integer("10", 1, 10), 10);
  EXPECT_EQ(integer("+7", 1, 10), 7);
  EXPECT_EQ(integer("-3", -5, 10), -3);
  EXPECT_EQ(integer("", 1, 10), std::nullopt) << "empty is unset";
  EXPECT_EQ(env::integer("COLO_X", 1, 10, "things", lookup_of({})), std::nullopt);
  // The boundaries: min - 1 and max + 1 are refused, with the range in the message.
  for (const char* out_of_range : {"0", "11", "-5", "99999999999999999999"}) {
    const std::string what = error_of<env::VariableError>([&] { integer(out_of_range, 1, 10); });
    EXPECT_NE(what.find(std::string("environment variable COLO_X=") + out_of_range + " is out of range"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("a whole number of things from 1 to 10"), std::string::npos) << what;
  }
  for (const char* malformed : {"10abc", "abc", " 5", "5 ", "1.5", "1e3", "-", "+", "0x10"}) {
    const std::string what = error_of<env::VariableError>([&] { integer(malformed, 1, 10); });
    EXPECT_NE(what.find(std::string("environment variable COLO_X='") + malformed + "' is not a whole number"),
              std::string::npos)
        << what;
  }
}

TEST(EnvVariables, TimeoutIsCheckedWhereverItIsRead) {
  auto timeout = [](const std::string& value) {
    return dist::Environment::timeout_from(lookup_of({{"COLO_TIMEOUT_MS", value}}));
  };
  EXPECT_EQ(timeout("1"), std::chrono::milliseconds(1));
  EXPECT_EQ(timeout(std::to_string(dist::Environment::kMaxTimeoutMs)),
            std::chrono::milliseconds(dist::Environment::kMaxTimeoutMs));
  EXPECT_EQ(timeout(""), std::nullopt);
  for (const char* bad : {"-5", "0", "10abc", "abc", "604800001"}) {
    const std::string what = error_of<env::VariableError>([&] { timeout(bad); });
    EXPECT_NE(what.find("COLO_TIMEOUT_MS"), std::string::npos) << bad << ": " << what;
    EXPECT_NE(what.find("milliseconds from 1 to 604800000"), std::string::npos) << what;
  }
  // The environment of a launched rank carries it too, and the process-wide reader agrees.
  const auto env = dist::Environment::from_lookup(lookup_of({{"COLO_TIMEOUT_MS", "2500"}}));
  EXPECT_EQ(env.timeout, std::chrono::milliseconds(2500));
  testing::ScopedEnv bad("COLO_TIMEOUT_MS", std::string("10abc"));
  EXPECT_THROW(dist::timeout_from_env(std::chrono::seconds(1)), env::VariableError);
  testing::ScopedEnv unset("COLO_TIMEOUT_MS", std::nullopt);
  EXPECT_EQ(dist::timeout_from_env(std::chrono::seconds(1)), std::chrono::seconds(1));
}

TEST(EnvVariables, LauncherVariablesNameTheVariable) {
  auto what = [](const std::map<std::string, std::string>& vars) {
    return error_of<std::invalid_argument>([&] { dist::Environment::from_lookup(lookup_of(vars)); });
  };
  EXPECT_NE(what({{"RANK", "1x"}, {"WORLD_SIZE", "2"}}).find("RANK='1x' is not a whole number"), std::string::npos);
  EXPECT_NE(what({{"RANK", "0"}, {"WORLD_SIZE", "0"}}).find("WORLD_SIZE=0 is out of range"), std::string::npos);
  EXPECT_NE(what({{"RANK", "-1"}, {"WORLD_SIZE", "2"}}).find("RANK=-1 is out of range"), std::string::npos);
  EXPECT_NE(what({{"RANK", "0"}, {"MASTER_PORT", "0"}}).find("MASTER_PORT=0 is out of range"), std::string::npos);
  EXPECT_NE(what({{"RANK", "0"}, {"MASTER_PORT", "65536"}}).find("MASTER_PORT=65536 is out of range"),
            std::string::npos);
  EXPECT_NE(what({{"RANK", "0"}, {"MASTER_PORT", "29500x"}}).find("MASTER_PORT='29500x'"), std::string::npos);
  EXPECT_NE(what({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_STEP_TASKS_PER_NODE", "x(2)"}})
                .find("SLURM_STEP_TASKS_PER_NODE='x(2)' does not start with a number of tasks"),
            std::string::npos);
  EXPECT_NE(what({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "two"}}).find("OMPI_COMM_WORLD_SIZE='two'"),
            std::string::npos);
  // Accepted as SLURM writes it.
  const auto slurm = dist::Environment::from_lookup(
      lookup_of({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "4"}, {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"}}));
  EXPECT_EQ(slurm.local_world_size, 2);
  EXPECT_EQ(slurm.master_port, 29500);
}

TEST(EnvVariables, JobTokenIsLongEnoughAndNeverRepeated) {
  const std::string short_token(env::kMinJobTokenLength - 1, 'a');
  const std::string what = error_of<env::VariableError>(
      [&] { dist::Environment::from_lookup(lookup_of({{"COLO_JOB_TOKEN", short_token}})); });
  EXPECT_NE(what.find("COLO_JOB_TOKEN (its value is not shown) must be at least 32 printable characters"),
            std::string::npos)
      << what;
  EXPECT_EQ(what.find(short_token), std::string::npos) << "a secret must not be echoed: " << what;
  EXPECT_THROW(
      dist::Environment::from_lookup(lookup_of({{"COLO_JOB_TOKEN", std::string(env::kMinJobTokenLength, ' ')}})),
      env::VariableError);
  const std::string token(env::kMinJobTokenLength, 'a');
  EXPECT_EQ(dist::Environment::from_lookup(lookup_of({{"COLO_JOB_TOKEN", token}})).job_token, token);
}

// train_vit reads COLO_TIMEOUT_MS with the launcher's variables, before anything else: a bad value
// is a usage error (exit 2) naming the variable, not a plugin that "rejected its options".
TEST(EnvVariables, TrainVitReportsABadTimeoutAsTheVariable) {
  const std::string train_vit = COLO_BINARY_DIR "/bin/train_vit";
  if (!std::ifstream(train_vit)) GTEST_SKIP() << train_vit << " is not built";
  testing::TemporaryDirectory dir;
  for (const char* bad : {"abc", "-5", "0", "10abc"}) {
    const std::string command = "env -u RANK -u WORLD_SIZE -u COLO_RDZV_FILE COLO_TIMEOUT_MS=" + std::string(bad) +
                                " " + train_vit +
                                " --dataset synthetic --synthetic-samples 32 --image-size 16 --model custom "
                                "--patch-size 8 --embed-dim 16 --depth 1 --heads 2 --batch-size 16 --epochs 1 >" +
                                dir.file("out") + " 2>" + dir.file("err");
    const int status = std::system(command.c_str());
    std::stringstream err;
    err << std::ifstream(dir.file("err")).rdbuf();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << bad << ": " << err.str();
    EXPECT_NE(err.str().find(std::string("environment variable COLO_TIMEOUT_MS")), std::string::npos) << err.str();
    EXPECT_EQ(err.str().find("rejected its options"), std::string::npos) << err.str();
    EXPECT_EQ(err.str().find("rendezvous"), std::string::npos) << err.str();
  }
}

}  // namespace
}  // namespace colo
