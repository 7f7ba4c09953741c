#pragma once

#include <colo/env/variables.h>

#include <optional>
#include <string>

// What colo-run --elastic MIN:MAX and the ranks it starts tell each other (docs/failures.md,
// "Elastic data parallelism"). colo-run starts at most MAX ranks per node and exports the world
// size the job was planned for; a rank that cannot take part says why in a note in colo-run's
// report directory (COLO_RUN_REPORTS) before it exits, and colo-run reads the notes when the
// attempt has ended:
//   - cannot start: this rank's slot (its GPU) failed the start-up probe, or COLO_FAULT's nostart
//     fired. colo-run leaves the slot out of every later attempt.
//   - world size unusable: the program cannot run on the world size it was started with (pp × tp
//     does not divide it, or the global batch cannot be kept). colo-run tries the next smaller
//     size, never fewer than MIN ranks per node.
// Notes, not exit statuses, carry this, so that a program's own status 3 or 4 is never mistaken
// for one. No LibTorch: colo-run reads and the ranks write through the same code.
namespace colo::env {

// COLO_ELASTIC_MAX_WORLD: under colo-run --elastic, the world size of a whole attempt (MAX ranks
// per node times the nodes); nullopt when the job is not elastic. The planned layout (its
// data-parallel size and hence the micro-batch that keeps the global batch) is that world's.
// Throws VariableError when it is not a whole number from 1.
std::optional<int> elastic_max_world(const Lookup& lookup = process_environment());
inline constexpr const char* kElasticMaxWorldVariable = "COLO_ELASTIC_MAX_WORLD";

enum class ElasticNote { kCannotStart, kWorldSizeUnusable };

// Where global rank `rank` leaves a note of `kind` in colo-run's directory `run_reports`.
std::string elastic_note_path(const std::string& run_reports, ElasticNote kind, int rank);

// Writes the note (atomically: a partial file renamed into place) holding `reason`, one line.
// Best effort, and a no-op when `run_reports` is empty (not started by colo-run): a note that
// cannot be written only costs colo-run its choice of what to do next.
void leave_elastic_note(const std::string& run_reports, ElasticNote kind, int rank, const std::string& reason);

// The reason a note of `kind` from `rank` gives, or nullopt when there is none.
std::optional<std::string> read_elastic_note(const std::string& run_reports, ElasticNote kind, int rank);

}  // namespace colo::env
