#pragma once
// Timing helpers of the profilers: wall time around synchronised device work, medians, a line
// fitted through (x, seconds) points.

#include <torch/cuda.h>
#include <torch/types.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

namespace colo::planner::detail {

inline void synchronize(const c10::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

inline double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const std::size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

// What one call of a collective costs a step, from the times of calls timed back to back: their
// mean without the floor(5 %) fastest and slowest (a rank preempted once). Not the median: a Gloo
// collective between CPU ranks takes either ~0.5 ms or ~4 ms, a step of dozens of them pays the
// mean of the two modes, and a median lands on one of them. On one mode the two agree.
inline double call_seconds(std::vector<double> times) {
  if (times.empty()) return 0.0;
  std::sort(times.begin(), times.end());
  const std::size_t dropped = times.size() / 20;  // floor(5 %) at each end
  double sum = 0;
  for (std::size_t i = dropped; i < times.size() - dropped; ++i) sum += times[i];
  return sum / static_cast<double>(times.size() - 2 * dropped);
}

// One call's steady cost from the mean seconds per call over k calls back to back (`per_call_of_k`)
// and the seconds of one call alone (`one_call`): k calls take wait + k·c + tail and one takes
// wait + c + tail (the device idle while the first call launches; the last call's kernels after
// the CPU is done), so c = (k·per_call_of_k - one_call) / (k - 1). Noise can make that smaller
// than makes sense: it is kept at or above half the k-call mean (no call costs less than half
// its share of a run of k), and at k < 2 the k-call mean is returned as it is.
inline double marginal_seconds(double per_call_of_k, double one_call, int k) {
  if (k < 2) return per_call_of_k;
  const double c = (k * per_call_of_k - one_call) / (k - 1);
  return std::max(c, 0.5 * per_call_of_k);
}

// What a collective costs beyond its fitted line when waited on right after computation: `calls`
// rounds of (computation, collective) took `with_seconds`, the same computation alone
// `without_seconds`, and the line prices one call at `line_seconds`. The difference per call less
// the line, kept at or above 0 (noise, or a device that overlaps the two); 0 for no calls.
inline double synchronous_extra_seconds(double with_seconds, double without_seconds, int calls, double line_seconds) {
  if (calls < 1) return 0.0;
  return std::max(0.0, (with_seconds - without_seconds) / calls - line_seconds);
}

// What a plugin's step costs per parameter beyond the baseline's (torch_ddp's) on one rank:
// (plugin - baseline) / elements, kept at or above 0 (a plugin measured faster than the plain
// step is noise, not a saving the layers could not see); 0 without elements.
inline double overhead_per_element(double plugin_seconds, double baseline_seconds, int64_t elements) {
  if (elements < 1) return 0.0;
  return std::max(0.0, (plugin_seconds - baseline_seconds) / static_cast<double>(elements));
}

// Least squares y = a + b·x; a clamped at >= 0 (a fixed cost), b at > 0 (refitted through the
// origin when the intercept went negative).
inline std::pair<double, double> fit_line(const std::vector<std::pair<double, double>>& points) {
  const double n = static_cast<double>(points.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : points) {
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  const double denominator = n * sxx - sx * sx;
  double b = denominator != 0 ? (n * sxy - sx * sy) / denominator : 0.0;
  double a = n > 0 ? (sy - b * sx) / n : 0.0;
  if (a < 0 || b <= 0) {
    a = std::max(a, 0.0);
    b = sxx > 0 ? std::max((sxy - a * sx) / sxx, 1e-30) : 1e-30;
  }
  return {a, b};
}

}  // namespace colo::planner::detail
