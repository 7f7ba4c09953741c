#pragma once

#include "launcher.h"

// The job supervisor: starts the ranks of one node, forwards their output line by line, and stops
// the whole job when one rank fails, colo-run is interrupted or its output loses its reader.
namespace colo::launcher {

// Resolves the port, the rendezvous file ("auto": a fresh temporary directory), the job token and
// the ranks' report directory, runs the job and removes the rendezvous file; returns colo-run's
// exit status (see run() in launcher.h). In job_setup.cpp.
int run_job(LaunchConfig config);

// Runs the job `config` describes, resolved (job.cpp): starts the ranks, forwards their output,
// stops them all when one fails; returns the exit status.
int supervise(const LaunchConfig& config);

}  // namespace colo::launcher
