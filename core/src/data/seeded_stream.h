// A stream of random numbers from one image's seed (SplitMix64 over seed_mix.h's mix64): the
// augmentations' draws for an image are a function of its seed alone, so they do not depend on
// the thread, batch or replica, and a resumed run repeats them.
#pragma once

#include <cmath>
#include <cstdint>

#include "seed_mix.h"

namespace colo::data::detail {

class SeededStream {
 public:
  explicit SeededStream(uint64_t seed) : state_(seed) {}

  uint64_t next() {
    const uint64_t s = state_;
    state_ += 0x9e3779b97f4a7c15ULL;
    return mix64(s);
  }
  // Uniform in [0, 1), 53 bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  double uniform(double low, double high) { return low + (high - low) * uniform(); }
  // Uniform in [0, n) (n small: the bias is below 2^-45).
  int64_t index(int64_t n) { return static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }
  // Uniform in [low, high], both included (Python's random.randint).
  int64_t integer(int64_t low, int64_t high) { return low + index(high - low + 1); }
  // Normal (Box-Muller).
  double normal(double mean, double stddev) {
    const double u1 = 1.0 - uniform();  // (0, 1]
    const double u2 = uniform();
    return mean + stddev * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  }

 private:
  uint64_t state_;
};

}  // namespace colo::data::detail
