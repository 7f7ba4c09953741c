#pragma once

#include <colo/env/variables.h>

#include <optional>
#include <string>
#include <vector>

// Fault injection for tests of failure handling (colo-run --max-restarts, train_vit --resume
// auto; docs/failures.md). COLO_FAULT lists the faults, separated by ';', each a list of
// key=value pairs separated by ',':
//
//   COLO_FAULT="rank=1,step=3,kind=crash;rank=0,step=5,kind=hang,restart=1"
//
//   rank     the global rank (RANK) the fault hits
//   step     the step boundary: the fault fires when the rank is about to take step `step`+1,
//            having taken `step` optimizer steps in all (a resumed run counts the saved ones);
//            not for nostart
//   kind     crash: the rank kills itself with SIGKILL (no clean-up, no flush, as kill -9 does);
//            hang: the rank stops making progress for ever (its peers' collective timeout,
//            COLO_TIMEOUT_MS, must catch it); nostart: the rank leaves colo-run a cannot-start note
//            (colo/env/elastic.h) and exits with code 3 before it
//            joins the job's store (no process group forms)
//   restart  the fault fires only in the attempt with this COLO_RESTART_COUNT (colo-run
//            --max-restarts exports it; unset counts as 0); default 0, so that a restarted job
//            that resumes before the step does not fail again
//
// Each fault says on stderr that it fires, so that a log tells an injected failure from a real one.
// No LibTorch: the readers live beside the other environment readers.
namespace colo::env {

struct Fault {
  enum class Kind { kCrash, kHang, kNoStart };
  int rank = 0;
  long long step = 0;  // unused for kNoStart
  Kind kind = Kind::kCrash;
  long long restart = 0;
};

// COLO_FAULT parsed; empty when unset or empty. Throws VariableError naming COLO_FAULT, the
// fault and what is wrong with it.
std::vector<Fault> faults(const Lookup& lookup = process_environment());

// COLO_RESTART_COUNT: the attempt colo-run --max-restarts is on (0 first); 0 when unset.
// Throws VariableError when it is not a whole number from 0.
long long restart_count(const Lookup& lookup = process_environment());

// The fault of kind crash or hang that fires on `rank` at the step boundary after `step` steps
// in this attempt, if any.
std::optional<Fault> fault_at_step(int rank, long long step, const Lookup& lookup = process_environment());

// Fires the crash or hang fault due on `rank` at the boundary after `step` steps: never returns
// when one is due. The Trainer calls it before every step.
void inject_fault_at_step(int rank, long long step);

// Exits with code 3 when a nostart fault is due on `rank` in this attempt (and checks
// COLO_FAULT: a bad value throws before the job forms). Called before the rendezvous.
void inject_fault_before_start(int rank);

}  // namespace colo::env
