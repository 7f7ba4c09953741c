#pragma once

#include <chrono>
#include <cstdint>

namespace colo::detail {

// Images per second over the steps since the last progress line, counting only the time spent
// training: an evaluation or a save between two progress lines pauses the window. (Before, the
// window's clock restarted at each epoch while its step count did not, so the first line after
// an evaluation divided the steps of two epochs' tails by one's time: 5,000-14,000 img/s where
// ~2,700 was right.)
class ThroughputWindow {
 public:
  using Clock = std::chrono::steady_clock;

  explicit ThroughputWindow(Clock::time_point now) : running_since_(now) {}

  // One optimizer step of `images` images finished.
  void add_step(int64_t images) { images_ += images; ++steps_; }
  // Stops the clock (before an evaluation or a save); resume() starts it again.
  void pause(Clock::time_point now);
  void resume(Clock::time_point now);
  int64_t steps() const { return steps_; }
  // Images per second of training time since the window opened, and a new, empty window.
  double take(Clock::time_point now);

 private:
  bool paused_ = false;
  Clock::time_point running_since_;
  double seconds_ = 0;  // closed stretches of training time
  int64_t images_ = 0;
  int64_t steps_ = 0;
};

}  // namespace colo::detail
