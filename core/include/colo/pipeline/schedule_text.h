#pragma once

#include <colo/pipeline/schedule.h>

#include <string>
#include <string_view>

namespace colo::pipeline {

// A schedule written as text, as torch.distributed.pipelining's _load_csv reads it: one line per
// pp rank, rank 0 first, each holding the rank's actions in execution order (Action's text form,
// separated by commas, spaces or both).
//
//   # 1f1b, pp=2, 4 microbatches
//   0F0,0F1,0B0,0F2,0B1,0F3,0B2,0B3
//   1F0,1B0,1F1,1B1,1F2,1B2,1F3,1B3
//
// '#' starts a comment that runs to the end of its line; lines with nothing else, and empty cells
// (torch's idle steps), are skipped. The actions set the rest of the shape: the model chunks per
// rank are the virtual stages (largest stage + 1) over pp, rounded up, and the backward is split
// (Schedule::split_backward) when any action is a W.
//
// `pp` and `microbatches` are what the text must fit (the job's pp size and microbatch count); 0
// takes them from the text (the rank lines; the largest microbatch + 1). The schedule is then
// validated (validate()), lowered and simulated (simulate()): a text that would deadlock is
// refused here, not at the first step. Throws std::invalid_argument listing every problem, each
// with `source` and the line it is on ("sched.txt:3: action 4: 'x' is not a pipeline action ..."),
// or `source` alone for the text as a whole.
Schedule schedule_from_text(std::string_view text, const std::string& source, int pp = 0, int microbatches = 0);

// schedule_from_text() of the file at `path` (named so in every problem); a file that cannot be
// read throws std::invalid_argument naming it.
Schedule load_schedule_file(const std::string& path, int pp = 0, int microbatches = 0);

// The reverse of schedule_from_text(): a comment line with the shape, then each rank's actions,
// comma-separated. A generated schedule written so is the starting point for a schedule of one's
// own (a forward-only schedule is not training text: the runner makes those itself).
std::string schedule_to_text(const Schedule& schedule);

}  // namespace colo::pipeline
