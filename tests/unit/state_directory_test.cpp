// StateDirectory, the --save directory of one run: opened at start-up (created, probed, locked),
// it refuses another run's states unless resumed from or told to overwrite, keeps a second run out
// while the first lives, and removes only the states its own run owns.
#include <colo/trainer/state_directory.h>
#include <colo/files/files.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "error_of.h"
#include "temporary_directory.h"

namespace colo {
namespace {

using colo::testing::error_of;
using TempDir = colo::testing::TemporaryDirectory;

#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "expected \"" << (part) << "\" in: " << (text)

// A state as a finished run left it: DIR/step-<N>/training_state.json and DIR/latest -> step-<N>.
void write_state(const std::string& root, const std::string& name, const std::string& marker = "{}") {
  files::create_directories(files::join(root, name));
  std::ofstream(files::join(root, name, "training_state.json")) << marker;
  files::remove(files::join(root, "latest"));
  ASSERT_EQ(::symlink(name.c_str(), files::join(root, "latest").c_str()), 0);
}

// One save through the directory, as CheckpointHook does it.
std::string save(StateDirectory& directory, int64_t step) {
  directory.prepare_staging();
  std::ofstream(files::join(directory.staging(), "training_state.json")) << step;
  return directory.publish(step);
}

std::vector<std::string> states(const std::string& root) {
  std::vector<std::string> out;
  for (const auto& name : files::list_directory(root)) {
    if (name.rfind("step-", 0) == 0) out.push_back(name);
  }
  return out;
}

TEST(StateDirectoryReuse, ANewRunRefusesAnotherRunsStateAndChangesNothing) {
  TempDir dir;
  const std::string root = dir / "ckpt";
  write_state(root, "step-00000004");
  const std::string message = error_of<StateDirectoryError>([&] { StateDirectory directory(root); });
  for (const char* part : {"holds the saved state of another run (step-00000004)", "Continue that run",
                           "StateDirectoryOptions::resumed_from", "StateDirectoryOptions::overwrite"}) {
    EXPECT_CONTAINS(message, part);
  }
  EXPECT_EQ(states(root), (std::vector<std::string>{"step-00000004"}));
  EXPECT_EQ(StateDirectory::resolve(root), files::join(root, "step-00000004"));
  // The program's own flags in the advice.
  EXPECT_CONTAINS(error_of<StateDirectoryError>([&] {
                    StateDirectory directory(root, StateDirectoryOptions().resume_name("--resume").overwrite_name("--overwrite"));
                  }),
                  "Continue that run (--resume " + root + "), save into another directory, or replace its states (--overwrite)");
}

TEST(StateDirectoryReuse, OverwriteRemovesTheOldStatesOnlyOnceItsOwnIsPublished) {
  TempDir dir;
  const std::string root = dir / "ckpt";
  write_state(root, "step-00000004");
  write_state(root, "step-00000009");
  StateDirectory directory(root, StateDirectoryOptions().overwrite(true));
  EXPECT_EQ(states(root).size(), 2U);  // a run that fails before its first save leaves them
  EXPECT_EQ(save(directory, 2), files::join(root, "step-00000002"));
  EXPECT_EQ(states(root), (std::vector<std::string>{"step-00000002"}));
  EXPECT_EQ(StateDirectory::resolve(root), files::canonical_or_absolute(files::join(root, "step-00000002")));
}

TEST(StateDirectoryReuse, AResumedRunReplacesTheStateItResumedFromAndNoOther) {
  TempDir dir;
  const std::string root = dir / "ckpt";
  write_state(root, "step-00000009");  // someone's, left beside
  write_state(root, "step-00000004");
  {
    StateDirectory directory(root, StateDirectoryOptions().resumed_from(StateDirectory::resolve(root)));
    save(directory, 6);
    EXPECT_EQ(states(root), (std::vector<std::string>{"step-00000006", "step-00000009"}));
    save(directory, 8);  // its own older state goes
    EXPECT_EQ(states(root), (std::vector<std::string>{"step-00000008", "step-00000009"}));
  }
  // Resumed from elsewhere: this directory's states are another run's.
  TempDir other;
  write_state(other.path(), "step-00000001");
  EXPECT_CONTAINS(error_of<StateDirectoryError>([&] {
                    StateDirectory d(root, StateDirectoryOptions().resumed_from(StateDirectory::resolve(other.path())));
                  }),
                  "holds the saved state of another run");
}

TEST(StateDirectoryReuse, ANewRunKeepsOnlyItsLatestStateAndSavingTheSameStepTwiceKeepsThePublishedOne) {
  TempDir dir;
  const std::string root = dir / "new";  // created by the run
  StateDirectory directory(root);
  save(directory, 2);
  save(directory, 4);
  EXPECT_EQ(states(root), (std::vector<std::string>{"step-00000004"}));
  save(directory, 4);
  EXPECT_EQ(states(root), (std::vector<std::string>{"step-00000004.2"}));
}

TEST(StateDirectoryLock, ASecondRunIsRefusedAtOpenNamingTheFirst) {
  TempDir dir;
  const std::string root = dir / "ckpt";
  std::string message;
  {
    StateDirectory first(root);
    message = error_of<StateDirectoryError>([&] { StateDirectory second(root); });
    // Resuming from the first one's directory, or overwriting, is no way around the lock.
    EXPECT_CONTAINS(error_of<StateDirectoryError>([&] { StateDirectory second(root, StateDirectoryOptions().overwrite(true)); }),
                    "another run is saving into this directory");
  }
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  for (const std::string& part : {std::string("another run is saving into this directory"),
                                  "pid " + std::to_string(::getpid()), std::string("on host ") + host, std::string(" UTC: "),
                                  std::string("colo_unit_tests"), std::string("wait for that run to end")}) {
    EXPECT_CONTAINS(message, part);
  }
  StateDirectory after(root);  // released with the first
  EXPECT_TRUE(files::is_regular_file(files::join(root, ".lock")));
}

TEST(StateDirectoryLock, EveryRunStagesInADirectoryOfItsOwn) {
  TempDir dir;
  const std::string root = dir / "ckpt";
  files::create_directories(files::join(root, ".staging"));  // an older colo's, of a run that died
  files::create_directories(files::join(root, ".staging-00000000abcd"));
  std::string first_staging;
  {
    StateDirectory first(root);
    first_staging = first.staging();
    EXPECT_EQ(files::parent_path(first_staging), root);
    EXPECT_EQ(first_staging, StateDirectory::staging_path(root, first.token()));
    EXPECT_FALSE(files::exists(files::join(root, ".staging")));
    EXPECT_FALSE(files::exists(files::join(root, ".staging-00000000abcd")));
  }
  EXPECT_FALSE(files::exists(first_staging));  // removed with the run
  StateDirectory second(root);
  EXPECT_NE(second.staging(), first_staging);
}

TEST(StateDirectoryProbe, AnUnusableDirectoryIsFoundAtOpen) {
  TempDir dir;
  std::ofstream(dir / "file") << "in the way";
  EXPECT_CONTAINS(error_of<StateDirectoryError>([&] { StateDirectory d(dir / "file"); }),
                  dir / "file" + ": a file is in the way");
  EXPECT_CONTAINS(error_of<StateDirectoryError>([&] { StateDirectory d(files::join(dir / "file", "ckpt")); }),
                  "cannot create the directory");
  write_state(dir / "ckpt", "step-00000004");
  EXPECT_CONTAINS(error_of<StateDirectoryError>([&] { StateDirectory d(dir / "ckpt/step-00000004"); }),
                  "is itself a saved state");
  // A directory no one may write into, root included: sysfs.
  if (files::is_directory("/sys/kernel")) {
    EXPECT_CONTAINS(error_of<StateDirectoryError>([&] { StateDirectory d("/sys/kernel"); }),
                    "/sys/kernel: cannot write into this directory");
  }
  // Permissions deny only those that are not root.
  if (::geteuid() != 0) {
    files::create_directories(dir / "read_only");
    ::chmod((dir / "read_only").c_str(), 0555);
    EXPECT_CONTAINS(error_of<StateDirectoryError>([&] { StateDirectory d(dir / "read_only"); }), "Permission denied");
    ::chmod((dir / "read_only").c_str(), 0755);
  }
}

}  // namespace
}  // namespace colo
