#pragma once

#include "launcher.h"

// The job supervisor: starts the ranks of one node, forwards their output line by line, and stops
// the whole job when one rank fails, colo-run is interrupted or its output loses its reader.
namespace colo::launcher {

// Resolves the port and the rendezvous file ("auto": a fresh temporary directory), runs the job
// and removes the rendezvous file; returns colo-run's exit status (see run() in launcher.h).
int run_job(LaunchConfig config);

}  // namespace colo::launcher
