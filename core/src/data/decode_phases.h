// Where ImageFolder's GPU decoding spends a batch's time, phase by phase: wall time and the calling
// thread's CPU time, summed over the loader's threads (ImageFolder::gpu_decode_phases reports it).
// A loader that falls behind during training but not alone shows here which step slows: the CPU's
// own work, nvJPEG's calls into the driver, or waits for the GPU.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

namespace colo::data::detail {

// CPU time of the calling thread, in ns: what a batch cost the loader, whatever else ran on the core.
int64_t thread_cpu_ns();

enum class DecodePhase { kRead, kParse, kSubmit, kDecodeWait, kResample, kFinish, kCount };

class DecodePhases {
 public:
  // Adds the time from its construction to its destruction to `phase`.
  class Span {
   public:
    Span(DecodePhases& phases, DecodePhase phase);
    ~Span();
    Span(const Span&) = delete;
    Span& operator=(const Span&) = delete;

   private:
    DecodePhases& phases_;
    DecodePhase phase_;
    int64_t wall_start_ns_;
    int64_t cpu_start_ns_;
  };

  void add_images(int64_t images) { images_ += images; }
  // "per image: read 0.051 ms (CPU 0.049), ..." over everything since construction; empty before
  // the first image.
  std::string summary() const;

 private:
  static constexpr size_t kPhases = static_cast<size_t>(DecodePhase::kCount);
  std::array<std::atomic<int64_t>, kPhases> wall_ns_{};
  std::array<std::atomic<int64_t>, kPhases> cpu_ns_{};
  std::atomic<int64_t> images_{0};
};

}  // namespace colo::data::detail
