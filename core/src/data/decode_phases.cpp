// DecodePhases (decode_phases.h).
#include "decode_phases.h"

#include <fmt/format.h>

#include <chrono>
#include <ctime>

namespace colo::data::detail {
namespace {

int64_t phase_wall_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}


constexpr const char* kPhaseNames[] = {"read files", "parse headers", "nvJPEG submit", "nvJPEG wait", "resample + labels",
                                  "finish wait"};

}  // namespace

int64_t thread_cpu_ns() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

DecodePhases::Span::Span(DecodePhases& phases, DecodePhase phase)
    : phases_(phases), phase_(phase), wall_start_ns_(phase_wall_ns()), cpu_start_ns_(thread_cpu_ns()) {}

DecodePhases::Span::~Span() {
  const auto index = static_cast<size_t>(phase_);
  phases_.wall_ns_[index] += phase_wall_ns() - wall_start_ns_;
  phases_.cpu_ns_[index] += thread_cpu_ns() - cpu_start_ns_;
}

std::string DecodePhases::summary() const {
  const int64_t images = images_.load();
  if (images == 0) return {};
  std::string out = fmt::format("per image over {} images (ms, wall/CPU):", images);
  for (size_t i = 0; i < kPhases; ++i) {
    out += fmt::format(" {} {:.3f}/{:.3f}{}", kPhaseNames[i], static_cast<double>(wall_ns_[i].load()) * 1e-6 / images,
                       static_cast<double>(cpu_ns_[i].load()) * 1e-6 / images, i + 1 < kPhases ? "," : "");
  }
  return out;
}

}  // namespace colo::data::detail
