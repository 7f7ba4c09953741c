#pragma once

#include <string>

namespace colo::bench {

// Records a few training steps with LibTorch's Kineto profiler (CPU ops and GPU kernels) and
// writes a Chrome trace, to compare colo's kernels with the timm peer's
// (benchmarks/peers/kernel_summary.py). LibTorch 2.x only: start() throws elsewhere.
class KernelTrace {
 public:
  void start();
  // Stops recording and writes the trace to `path`.
  void stop_and_save(const std::string& path);
};

}  // namespace colo::bench
