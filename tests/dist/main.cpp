// Entry point of colo_dist_tests, started once per rank by colo-run. Every rank runs every test
// and asserts; a failure on any rank makes that rank exit non-zero, which makes colo-run fail.
// Tests must call collectives in the same order on every rank, so none may be skipped on a
// subset of ranks.
#include "dist_test_env.h"

#include <colo/dist/device.h>
#include <colo/dist/environment.h>

#include <ATen/Context.h>
#include <gtest/gtest.h>

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
}  // namespace colo::test

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  torch::set_num_threads(1);  // several ranks share two cores
  const auto env = colo::dist::Environment::from_env();
  colo::dist::ProcessGroup::Options options;
  options.timeout = colo::dist::timeout_from_env(std::chrono::seconds(60));
  colo::test::g_world = colo::dist::init_world(env, options);
  const int result = RUN_ALL_TESTS();
  // A rank that failed must not leave the others waiting in a final collective: exit now.
  colo::test::g_world.reset();
  return result;
}
