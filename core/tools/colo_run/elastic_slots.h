#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "launcher.h"

// colo-run --elastic MIN:MAX (docs/failures.md): which of the node's MAX slots the next attempt
// starts, from what the ranks of a failed attempt said in their notes (colo/env/elastic.h).
namespace colo::launcher {

// What the ranks of a failed attempt told colo-run --elastic.
struct ElasticNotes {
  std::vector<std::pair<int, std::string>> cannot_start;           // local rank, why
  std::optional<std::pair<int, std::string>> world_size_unusable;  // the first rank to say so, why
};

// The notes of the attempt `config` describes, read from its report directory before it goes.
ElasticNotes read_elastic_notes(const LaunchConfig& config);

// The node's MAX places for a rank (a GPU each), those left out for good (their rank could not
// start), and the largest world the program has not refused.
class ElasticSlots {
 public:
  // All of config.elastic_max slots; their GPUs are the entries of `visible_devices` (colo-run's
  // inherited CUDA_VISIBLE_DEVICES) where it has them, else the slots' own numbers.
  ElasticSlots(const LaunchConfig& config, std::vector<std::string> visible_devices);

  // The ranks the next attempt starts (the caller stops below min()).
  int size() const;
  int min() const { return min_; }
  int live() const { return static_cast<int>(live_.size()); }
  int cap() const { return cap_; }

  // Points `config` at the next attempt's first `count` live slots (at most size(); with several
  // nodes node 0's colo-run says how many): its rank count and, once those are not the node's
  // first slots, the GPUs they stand for (config.elastic_devices).
  void configure(LaunchConfig& config, int count) const;

  // Takes what the failed attempt's ranks said (the attempt ran `attempt_size` ranks on the first
  // of the live slots); returns what colo-run prints about it.
  std::vector<std::string> take(const ElasticNotes& notes, int attempt_size);

 private:
  std::string device_of_slot(int slot) const;

  int min_;
  int cap_;
  std::vector<std::string> visible_;
  std::vector<int> live_;
};

}  // namespace colo::launcher
