#pragma once

#include <colo/env/variables.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>

namespace colo::dist {

// Where this process sits in the job, read from the variables a launcher sets: colo-run and
// torchrun (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), SLURM
// (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, ...) and Open MPI (OMPI_COMM_WORLD_*), with colo's
// own (COLO_RDZV_FILE, COLO_TIMEOUT_MS, COLO_JOB_TOKEN, COLO_RUN_REPORTS). With none of them set,
// the process is a job of one. Every variable is read through colo::env (colo/env/variables.h):
// whole-string numbers in range, errors that name the variable.
struct Environment {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string rdzv_file;          // COLO_RDZV_FILE: rendezvous through a FileStore (one node)
  std::string launcher = "none";  // "colo-run", "torchrun", "slurm", "openmpi" or "none"
  // COLO_TIMEOUT_MS: the timeout of every collective, when the variable is set.
  std::optional<std::chrono::milliseconds> timeout;
  // COLO_JOB_TOKEN: the secret every rank of the job proves it holds before it is admitted, and
  // with which it signs what it writes into the job's store (rendezvous.h says what it guards).
  // Empty: none (a launch by hand, torchrun, SLURM), and the store is trusted as it is.
  std::string job_token;
  // COLO_RUN_REPORTS: a directory of colo-run's where a rank leaves a note when it fails because
  // a peer went away, so that colo-run names the peer, the cause, rather than this rank.
  std::string run_reports;

  // The largest COLO_TIMEOUT_MS taken: a week.
  static constexpr long long kMaxTimeoutMs = env::kMaxTimeoutMs;

  // Reads the process environment. Throws env::VariableError (a std::invalid_argument) naming
  // the variable when one is present but malformed (not a whole number, out of range, rank
  // outside [0, world_size), ...).
  static Environment from_env();
  // Same, from an explicit lookup (tests).
  static Environment from_lookup(const std::function<const char*(const char*)>& getenv_fn);

  // COLO_TIMEOUT_MS alone, checked as from_env checks it; nullopt when unset.
  static std::optional<std::chrono::milliseconds> timeout_from(const std::function<const char*(const char*)>& getenv_fn);

  bool is_distributed() const { return world_size > 1; }
  // Every rank of the job runs on this node (colo-run or torchrun on one node, a one-node SLURM
  // step): nothing of the job need be reachable from another machine.
  bool is_single_node() const { return local_world_size >= world_size; }
};

}  // namespace colo::dist
