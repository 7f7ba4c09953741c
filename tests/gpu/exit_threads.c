/* A diagnostic for the GPU machine's runs, not part of colo: loaded first with LD_PRELOAD by
 * tests/gpu/device_session.sh (exit-loop stage), so its destructor runs last of all at exit, after
 * the program's atexit handlers and the other libraries' static destructors (the CUDA runtime's
 * and LibTorch's included). It prints the names of the threads still alive at that point, one
 * line per process: "exit-threads pid N: main pt_nccl_watchdg ...". PyTorch names its NCCL
 * threads pt_nccl_*; any of them still running there outlived the CUDA teardown. */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

__attribute__((destructor)) static void list_threads_at_exit(void) {
  DIR* tasks = opendir("/proc/self/task");
  if (!tasks) return;
  char line[4096];
  size_t used = (size_t)snprintf(line, sizeof line, "exit-threads pid %d:", getpid());
  struct dirent* entry;
  while ((entry = readdir(tasks)) != NULL && used < sizeof line - 64) {
    if (entry->d_name[0] == '.') continue;
    char path[300], name[64] = "?";
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", entry->d_name);
    FILE* comm = fopen(path, "r");
    if (comm) {
      if (fgets(name, sizeof name, comm)) name[strcspn(name, "\n")] = '\0';
      fclose(comm);
    }
    used += (size_t)snprintf(line + used, sizeof line - used, " %s", name);
  }
  closedir(tasks);
  fprintf(stderr, "%s\n", line);
}
