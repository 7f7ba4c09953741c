#include "throughput_window.h"

#include <cmath>

namespace colo::detail {

void ThroughputWindow::pause(Clock::time_point now) {
  if (paused_) return;
  seconds_ += std::chrono::duration<double>(now - running_since_).count();
  paused_ = true;
}

void ThroughputWindow::resume(Clock::time_point now) {
  if (!paused_) return;
  running_since_ = now;
  paused_ = false;
}

double ThroughputWindow::take(Clock::time_point now) {
  double seconds = seconds_;
  if (!paused_) seconds += std::chrono::duration<double>(now - running_since_).count();
  const double rate = seconds > 0 ? static_cast<double>(images_) / seconds : NAN;
  seconds_ = 0;
  images_ = 0;
  steps_ = 0;
  running_since_ = now;
  return rate;
}

}  // namespace colo::detail
