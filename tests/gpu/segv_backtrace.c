/* A diagnostic for the GPU machine's runs, not part of colo: loaded with LD_PRELOAD by
 * tests/gpu/device_session.sh, it prints the faulting thread's stack to stderr when a process
 * receives SIGSEGV, then lets the signal kill it as before (same exit status). The machine has
 * no gdb, and a crash seen once in ~30 runs is otherwise just "exit 139". */
#define _GNU_SOURCE
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static void print_backtrace(int sig) {
  void* frames[64];
  const int n = backtrace(frames, 64);
  char head[128];
  const int len = snprintf(head, sizeof head, "\n*** signal %d in pid %d, thread %ld; backtrace:\n", sig, getpid(),
                           (long)syscall(SYS_gettid));
  if (write(STDERR_FILENO, head, (size_t)len) < 0) { /* nothing better to do inside a signal handler */
  }
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  signal(sig, SIG_DFL);
  raise(sig);
}

__attribute__((constructor)) static void install(void) {
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_handler = print_backtrace;
  action.sa_flags = SA_RESETHAND;
  sigaction(SIGSEGV, &action, NULL);
}
