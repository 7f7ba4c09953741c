#include "spawn.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <stdexcept>

#include "posix.h"

namespace colo::launcher {

Spawned spawn_rank(int global_rank, char* const* argv, char* const* envp, bool prefix, const sigset_t& mask) {
  int exec_pipe[2] = {-1, -1};
  int out_pipe[2] = {-1, -1};
  int err_pipe[2] = {-1, -1};
  auto fail = [&](const char* what) {
    const int err = errno;
    for (int fd : {exec_pipe[0], exec_pipe[1], out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) {
      if (fd >= 0) ::close(fd);
    }
    throw std::runtime_error(fmt::format("cannot {} for rank {}: {}", what, global_rank, errno_text(err)));
  };
  // Close-on-exec everywhere: otherwise rank 2 would inherit rank 0's pipe ends and rank 0's
  // output would never reach EOF while rank 2 lives.
  if (::pipe2(exec_pipe, O_CLOEXEC) != 0 ||
      (prefix && (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0))) {
    fail("create pipes");
  }
  const pid_t launcher_pid = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) fail("fork");
  if (pid == 0) {
    // A session (hence a process group) of its own: kill(-pid) then reaches everything the
    // rank started, and the terminal's Ctrl-C reaches only colo-run, which decides how to
    // stop the job. Like torchrun's start_new_session.
    ::setsid();
    // If colo-run dies (even by SIGKILL), the kernel kills the rank. The signal fires when
    // the *thread* that forked exits; colo-run forks from its only thread. Grandchildren are
    // not covered: they rely on colo-run's kill(-pgid) while it is alive.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != launcher_pid) ::_exit(1);  // colo-run died before prctl took effect
    if (prefix) {
      ::dup2(out_pipe[1], STDOUT_FILENO);
      ::dup2(err_pipe[1], STDERR_FILENO);
    }
    // Signal masks and ignored dispositions survive exec: undo colo-run's (main() ignores
    // SIGPIPE), so that a rank writing to a closed pipe ends as it would on its own.
    ::signal(SIGPIPE, SIG_DFL);
    ::sigprocmask(SIG_SETMASK, &mask, nullptr);
    ::execvpe(argv[0], argv, envp);
    int err = errno;
    ssize_t ignored = ::write(exec_pipe[1], &err, sizeof err);
    (void)ignored;
    ::_exit(127);
  }
  Spawned spawned;
  spawned.pid = pid;
  ::close(exec_pipe[1]);
  if (prefix) {
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    spawned.out_fd = out_pipe[0];
    spawned.err_fd = err_pipe[0];
  }
  int err = 0;
  ssize_t n;
  do {
    n = ::read(exec_pipe[0], &err, sizeof err);
  } while (n < 0 && errno == EINTR);
  ::close(exec_pipe[0]);
  if (n != static_cast<ssize_t>(sizeof err)) return spawned;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  spawned.exec_error = err;
  return spawned;
}

}  // namespace colo::launcher
