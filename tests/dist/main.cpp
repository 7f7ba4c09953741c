// Entry point of colo_dist_tests, started once per rank by colo-run. Every rank runs every test
// and asserts; a failure on any rank makes that rank exit non-zero, which makes colo-run fail.
// Tests must call collectives in the same order on every rank, so none may be skipped on a
// subset of ranks.
//
// Skips are not passes: with COLO_DIST_SKIP_REPORT set (CTest's dist_np<N>), rank 0 writes there
// one line per skipped case ("Suite.Case: reason"; an empty file when every case ran), which the
// CTest test dist_np<N>_every_case_ran shows as skipped (tests/dist/every_case_ran.sh).
#include "dist_test_env.h"

#include <colo/dist/device.h>
#include <colo/dist/environment.h>

#include <ATen/Context.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace colo::test {
namespace {
std::shared_ptr<dist::ProcessGroup> g_world;
}
std::shared_ptr<dist::ProcessGroup> world() { return g_world; }
c10::Device device() {
  // What a program gets: its GPU under NCCL, cuda:0 for every rank under COLO_BACKEND=gloo on a
  // GPU machine (CUDA tensors over Gloo), the CPU elsewhere.
  static const c10::Device chosen = [] {
    const auto selected = dist::select_device(dist::Environment::from_env());
    if (selected.is_cuda()) {
      // fp32 equivalence at 1e-5 and bit-exact resume need true fp32 and deterministic kernels:
      // cuDNN's convolutions default to TF32 (10-bit mantissa) and to non-deterministic algorithms.
      at::globalContext().setAllowTF32CuDNN(false);
      at::globalContext().setAllowTF32CuBLAS(false);
      at::globalContext().setDeterministicCuDNN(true);
    }
    return selected;
  }();
  return chosen;
}
namespace {
// "Suite.Case: reason" for every case that was skipped, one a line.
std::string skipped_cases() {
  std::string lines;
  const auto& unit = *::testing::UnitTest::GetInstance();
  for (int i = 0; i < unit.total_test_suite_count(); ++i) {
    const auto& suite = *unit.GetTestSuite(i);
    for (int j = 0; j < suite.total_test_count(); ++j) {
      const auto& info = *suite.GetTestInfo(j);
      if (!info.should_run() || !info.result()->Skipped()) continue;
      std::string reason;
      for (int k = 0; k < info.result()->total_part_count(); ++k) {
        const auto& part = info.result()->GetTestPartResult(k);
        if (part.skipped()) reason = part.message();
      }
      lines += std::string(suite.name()) + "." + info.name() + ": " + (reason.empty() ? "(no reason given)" : reason) +
               "\n";
    }
  }
  return lines;
}
}  // namespace
}  // namespace colo::test

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  torch::set_num_threads(1);  // several ranks share two cores
  const auto env = colo::dist::Environment::from_env();
  colo::dist::ProcessGroup::Options options;
  options.timeout = colo::dist::timeout_from_env(std::chrono::seconds(60));
  colo::test::g_world = colo::dist::init_world(env, options);
  const char* skip_report = std::getenv("COLO_DIST_SKIP_REPORT");
  const bool reports = skip_report != nullptr && *skip_report != '\0' && colo::test::g_world->rank() == 0;
  if (reports) std::remove(skip_report);  // no stale report from an earlier run
  const int result = RUN_ALL_TESTS();
  if (reports) std::ofstream(skip_report) << colo::test::skipped_cases();
  // A rank that failed must not leave the others waiting in a final collective: exit now.
  colo::test::g_world.reset();
  return result;
}
