#pragma once

#include <functional>
#include <string>

namespace colo::dist {

// Where this process sits in the job, read from the variables a launcher sets: colo-run and
// torchrun (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), SLURM
// (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, ...) and Open MPI (OMPI_COMM_WORLD_*). With
// none of them set, the process is a job of one.
struct Environment {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string rdzv_file;          // COLO_RDZV_FILE: rendezvous through a FileStore (one node)
  std::string launcher = "none";  // "colo-run", "torchrun", "slurm", "openmpi" or "none"

  // Reads the process environment. Throws std::invalid_argument naming the variable when one
  // is present but malformed (non-numeric, rank outside [0, world_size), ...).
  static Environment from_env();
  // Same, from an explicit lookup (tests).
  static Environment from_lookup(const std::function<const char*(const char*)>& getenv_fn);

  bool is_distributed() const { return world_size > 1; }
};

}  // namespace colo::dist
