#pragma once

#include <colo/booster/trainer_hook.h>

#include <cstdint>
#include <string>

namespace colo::detail {

// Where the run is when a record is printed: what the progress line says besides the record.
struct ProgressPosition {
  bool in_fit = true;         // false: Trainer::evaluate() called on its own (no epochs to count)
  int64_t epochs = 0;         // fit()'s epochs
  int64_t global_step = 0;
  int64_t stop_step = 0;
  double eta_seconds = 0.0;   // training records only
  bool show_loader_speed = false;
};

// The progress line of a record: the Trainer's and its own hooks' fields in a fixed layout, then
// every other field (a user hook's) as "name value" in the record's (alphabetical) order, so a
// field a hook adds is seen without the Trainer knowing it.
std::string progress_line(const Record& record, const ProgressPosition& position);

}  // namespace colo::detail
