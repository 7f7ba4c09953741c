// colo-run --elastic's notes and slots (elastic_slots.h).
#include "elastic_slots.h"

#include <colo/env/elastic.h>
#include <fmt/format.h>

#include <algorithm>

namespace colo::launcher {

ElasticNotes read_elastic_notes(const LaunchConfig& config) {
  ElasticNotes notes;
  for (int local = 0; local < config.nproc_per_node; ++local) {
    const int rank = first_rank_of(config) + local;
    if (auto why = env::read_elastic_note(config.run_reports, env::ElasticNote::kCannotStart, rank)) {
      notes.cannot_start.emplace_back(local, *why);
    }
    if (auto why = env::read_elastic_note(config.run_reports, env::ElasticNote::kWorldSizeUnusable, rank);
        why && !notes.world_size_unusable) {
      notes.world_size_unusable.emplace(rank, *why);
    }
  }
  return notes;
}

ElasticSlots::ElasticSlots(const LaunchConfig& config, std::vector<std::string> visible_devices)
    : min_(config.elastic_min), cap_(config.elastic_max), visible_(std::move(visible_devices)) {
  for (int slot = 0; slot < config.elastic_max; ++slot) live_.push_back(slot);
}

int ElasticSlots::size() const { return std::min<int>(cap_, static_cast<int>(live_.size())); }

std::string ElasticSlots::device_of_slot(int slot) const {
  return slot < static_cast<int>(visible_.size()) ? visible_[static_cast<std::size_t>(slot)] : std::to_string(slot);
}

void ElasticSlots::configure(LaunchConfig& config, int count) const {
  count = std::clamp(count, 0, static_cast<int>(live_.size()));
  config.nproc_per_node = count;
  config.elastic_devices.clear();
  bool first_slots = true;
  for (int local = 0; local < count; ++local) first_slots = first_slots && live_[static_cast<std::size_t>(local)] == local;
  if (first_slots) return;  // the node's (or the inherited list's) own numbering holds
  for (int local = 0; local < count; ++local) {
    config.elastic_devices.push_back(device_of_slot(live_[static_cast<std::size_t>(local)]));
  }
}

std::vector<std::string> ElasticSlots::take(const ElasticNotes& notes, int attempt_size) {
  std::vector<std::string> said;
  std::vector<int> gone;
  for (const auto& [local, why] : notes.cannot_start) {
    const int slot = live_[static_cast<std::size_t>(local)];
    said.push_back(fmt::format("elastic: leaving out slot {} (GPU {}) from now on: local rank {} could not start: {}",
                               slot, device_of_slot(slot), local, why));
    gone.push_back(slot);
  }
  for (int slot : gone) live_.erase(std::find(live_.begin(), live_.end(), slot));
  if (notes.world_size_unusable) {
    cap_ = std::min(cap_, attempt_size - 1);
    said.push_back(fmt::format("elastic: the program cannot run on {} rank{} (rank {}: {})", attempt_size,
                               attempt_size == 1 ? "" : "s", notes.world_size_unusable->first,
                               notes.world_size_unusable->second));
  }
  return said;
}

}  // namespace colo::launcher
