// train_vit's --max-nonfinite-steps guard on its own (the CLI test covers a run that diverges
// for good): which runs of non-finite steps end a run, and what the error says.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>
#include <string>
#include <vector>

#include "nonfinite_loss_guard.h"

namespace {

using colo::NonFiniteLossError;
using colo::detail::NonFiniteLossGuard;

const float kNan = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

// Feeds one loss per step (steps 1, 2, ...) and checks whenever the guard says so; returns the
// error, or "" when the run went through.
std::string run_steps(NonFiniteLossGuard& guard, const std::vector<float>& losses, int64_t skipped = 0) {
  const auto last = static_cast<int64_t>(losses.size());
  for (int64_t step = 1; step <= last; ++step) {
    guard.observe(torch::tensor(losses[static_cast<std::size_t>(step - 1)]));
    guard.end_step(step);
    try {
      if (guard.due(step, last)) guard.check(step, nullptr, skipped);
    } catch (const NonFiniteLossError& e) {
      return e.what();
    }
  }
  return "";
}

TEST(NonFiniteLossGuard, ShortRunsPassAndALongOneStopsTheRunNamingItsSteps) {
  NonFiniteLossGuard guard(3, torch::kCPU, "--max-nonfinite-steps", "Lower --lr");
  // Runs of 2 (steps 2-3) and 2 (5-6) pass; 8..12 is 5 long and is seen at step 12's check.
  const std::string error =
      run_steps(guard, {1, kNan, kNan, 1, kInf, kNan, 1, kNan, kNan, kNan, kNan, kNan, 1, 1, 1});
  EXPECT_NE(error.find("stopped at step 12: the training loss was not finite (NaN or infinite) for 5 consecutive "
                       "optimizer steps (steps 8..12)"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("--max-nonfinite-steps 3 is the limit"), std::string::npos) << error;
}

TEST(NonFiniteLossGuard, ARunThatEndedBetweenTwoChecksIsStillCaught) {
  NonFiniteLossGuard guard(4, torch::kCPU, "--max-nonfinite-steps", "Lower --lr");
  // Steps 5..8 are non-finite, step 9 is fine again; the next check is at step 12.
  const std::string error = run_steps(guard, {1, 1, 1, 1, kNan, kNan, kNan, kNan, 1, 1, 1, 1}, /*skipped=*/2);
  EXPECT_NE(error.find("stopped at step 8: "), std::string::npos) << error;
  EXPECT_NE(error.find("(steps 5..8)"), std::string::npos) << error;
  EXPECT_NE(error.find("The fp16 loss scaler also skipped 2 steps for overflowing gradients, which is not an error"),
            std::string::npos)
      << error;

  NonFiniteLossGuard later(4, torch::kCPU, "--max-nonfinite-steps", "Lower --lr");
  const std::string caught_late = run_steps(later, {1, 1, 1, 1, 1, kNan, kNan, kNan, kNan, 1, 1, 1});
  EXPECT_NE(caught_late.find("stopped at step 12: "), std::string::npos) << caught_late;
  EXPECT_NE(caught_late.find("(steps 6..9)"), std::string::npos) << caught_late;
}

TEST(NonFiniteLossGuard, OneBadMicroBatchMakesTheStepBadAndZeroTurnsTheGuardOff) {
  NonFiniteLossGuard guard(2, torch::kCPU, "--max-nonfinite-steps", "Lower --lr");
  for (int64_t step = 1; step <= 2; ++step) {
    guard.observe(torch::tensor(1.0f));
    guard.observe(torch::tensor(kNan));  // the second micro-batch of the step
    guard.end_step(step);
  }
  ASSERT_TRUE(guard.due(2, 10));
  EXPECT_THROW(guard.check(2, nullptr, 0), NonFiniteLossError);

  NonFiniteLossGuard off(0, torch::kCPU, "--max-nonfinite-steps", "Lower --lr");
  EXPECT_EQ(run_steps(off, {kNan, kNan, kNan, kNan}), "");
  EXPECT_FALSE(off.due(4, 4));
}

}  // namespace
