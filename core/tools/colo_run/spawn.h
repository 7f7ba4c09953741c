#pragma once

#include <signal.h>
#include <sys/types.h>

// How colo-run starts one rank: fork, a session of its own, death with colo-run, exec.
namespace colo::launcher {

struct Spawned {
  pid_t pid = -1;
  int out_fd = -1;      // read ends of the rank's stdout and stderr (with prefixing; else -1)
  int err_fd = -1;
  int exec_error = 0;   // the exec's errno when it failed (the child is reaped then), else 0
};

// Forks and execs `argv` with `envp` for global rank `global_rank`. The exec status travels over a
// close-on-exec pipe: EOF means the exec happened, a written errno means it failed, so a typo in
// the program name is reported as such instead of as N ranks exiting with 127. With `prefix`, the
// rank's stdout and stderr are pipes whose read ends come back; `mask` is the signal mask the
// rank starts with (colo-run's own before it blocked its signals). Throws std::runtime_error
// (out of processes or descriptors).
Spawned spawn_rank(int global_rank, char* const* argv, char* const* envp, bool prefix, const sigset_t& mask);

}  // namespace colo::launcher
