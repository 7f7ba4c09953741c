#pragma once

#include "launcher.h"
#include "node_link.h"

// The job supervisor: starts the ranks of one node, forwards their output line by line, and stops
// the whole job when one rank fails, colo-run is interrupted or its output loses its reader.
namespace colo::launcher {

// Resolves the port, the rendezvous file ("auto": a fresh temporary directory), the job token and
// the ranks' report directory, runs the job and removes the rendezvous file; with --max-restarts
// starts a failed job again, each attempt with a rendezvous and a token of its own. Returns
// colo-run's exit status (see run() in launcher.h). In job_setup.cpp.
int run_job(LaunchConfig config);

// How one attempt at the job ended.
struct JobOutcome {
  int exit_code = 0;         // colo-run's exit status for it (see run() in launcher.h)
  bool rank_failed = false;  // a rank failed: --max-restarts may start the job again
  std::string cause;         // what failed, as colo-run reported it; empty on success
  bool stopped_by_link = false;  // another node's failure stopped this node's ranks (NodeLink)
};

// Runs the job `config` describes, resolved (job.cpp): starts the ranks, forwards their output,
// stops them all when one fails; says how it ended. With `link` (several nodes that may restart)
// it also stops them when another node says so, and tells the other nodes at once of a cause here.
JobOutcome supervise(const LaunchConfig& config, NodeLink* link = nullptr);

}  // namespace colo::launcher
