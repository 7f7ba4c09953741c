// train_vit's progress-line throughput: evaluations and saves between two lines are not
// training time, and the steps before them still count.
#include <gtest/gtest.h>

#include "throughput_window.h"

namespace colo::detail {
namespace {

using Clock = ThroughputWindow::Clock;
using std::chrono::seconds;

TEST(ThroughputWindow, LeavesOutPausesAndKeepsTheirStepsAround) {
  const Clock::time_point t0{};
  ThroughputWindow window(t0);
  for (int i = 0; i < 18; ++i) window.add_step(128);  // the end of an epoch: 18 steps in 9 s
  window.pause(t0 + seconds(9));
  window.resume(t0 + seconds(109));  // a 100-second evaluation
  for (int i = 0; i < 32; ++i) window.add_step(128);  // the next epoch's first 32 steps in 16 s
  EXPECT_EQ(window.steps(), 50);
  EXPECT_DOUBLE_EQ(window.take(t0 + seconds(125)), 50 * 128 / 25.0);
  // The next window starts where the last one was taken.
  for (int i = 0; i < 10; ++i) window.add_step(128);
  EXPECT_DOUBLE_EQ(window.take(t0 + seconds(130)), 10 * 128 / 5.0);
}

TEST(ThroughputWindow, TakenWhilePausedCountsUpToThePause) {
  const Clock::time_point t0{};
  ThroughputWindow window(t0);
  for (int i = 0; i < 4; ++i) window.add_step(10);
  window.pause(t0 + seconds(2));
  window.pause(t0 + seconds(50));  // a second pause changes nothing
  EXPECT_DOUBLE_EQ(window.take(t0 + seconds(60)), 20.0);
}

}  // namespace
}  // namespace colo::detail
