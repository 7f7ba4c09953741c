#include "self_check.h"

#include <colo/env/variables.h>
#include <colo/files/files.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <optional>

#include "job.h"
#include "output.h"
#include "posix.h"

namespace colo::launcher {

int run_self_check(LaunchConfig config) {
  char exe[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0)
    throw std::runtime_error("cannot find colo-run's own executable: " + errno_text(errno));
  exe[n] = '\0';

  files::TemporaryDirectory check_dir("colo-run-check-");
  config.command = {exe, kCheckRankFlag, check_dir.path()};
  // Exercise the rendezvous-file path as well, where it applies.
  if (config.rdzv_file.empty() && config.nnodes == 1) config.rdzv_file = "auto";
  if (config.master_port == 0) config.master_port = pick_free_port(config.master_addr);

  const int code = run_job(config);
  if (code != 0) {
    print_to(STDERR_FILENO, "colo-run --check: FAILED (see the messages above)\n");
    return code;
  }
  // Each rank created rank-<RANK> exclusively: exactly this node's ranks must be there, which
  // shows that no two ranks got the same RANK and none got a rank of another node.
  std::vector<std::string> missing;
  for (int local = 0; local < config.nproc_per_node; ++local) {
    const int rank = config.node_rank * config.nproc_per_node + local;
    if (!files::lexists(check_dir.file("rank-" + std::to_string(rank)))) {
      missing.push_back(std::to_string(rank));
    }
  }
  if (!missing.empty()) {
    print_to(STDERR_FILENO, "colo-run --check: FAILED: ranks {} did not report\n",
             fmt::join(missing, ", "));
    return 1;
  }
  const int first = config.node_rank * config.nproc_per_node;
  print_to(STDOUT_FILENO,
           "colo-run --check: OK: node {} of {} started ranks {}..{} of {} (master {}:{}{}); each "
           "verified RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, "
           "MASTER_PORT, COLO_LAUNCHER and COLO_JOB_TOKEN, that it leads its own process group and that "
           "PR_SET_PDEATHSIG is SIGKILL; no two ranks got the same RANK\n",
           config.node_rank, config.nnodes, first, first + config.nproc_per_node - 1,
           config.nnodes * config.nproc_per_node, config.master_addr, config.master_port,
           config.rdzv_file.empty() ? "" : ", rendezvous file checked");
  return 0;
}

int check_rank_main(const std::string& check_dir) {
  if (check_dir.empty()) {
    print_to(STDERR_FILENO, "{} is colo-run's internal self-check mode; run colo-run --check\n",
             kCheckRankFlag);
    return 2;
  }
  std::vector<std::string> problems;
  auto number = [&](const char* name) -> std::optional<int> {
    try {
      if (auto value = env::integer(name, 0, INT_MAX, "a count or rank")) return static_cast<int>(*value);
      problems.push_back(fmt::format("{} is not set", name));
    } catch (const env::VariableError& e) {
      problems.push_back(e.what());
    }
    return std::nullopt;
  };
  const auto rank = number("RANK");
  const auto local_rank = number("LOCAL_RANK");
  const auto world_size = number("WORLD_SIZE");
  const auto local_world_size = number("LOCAL_WORLD_SIZE");
  const auto group_rank = number("GROUP_RANK");
  const auto master_port = number("MASTER_PORT");

  if (rank && world_size && *rank >= *world_size) {
    problems.push_back(fmt::format("RANK {} is not below WORLD_SIZE {}", *rank, *world_size));
  }
  if (local_rank && local_world_size && *local_rank >= *local_world_size) {
    problems.push_back(fmt::format("LOCAL_RANK {} is not below LOCAL_WORLD_SIZE {}", *local_rank,
                                   *local_world_size));
  }
  if (world_size && local_world_size &&
      (*local_world_size == 0 || *world_size % *local_world_size != 0)) {
    problems.push_back(fmt::format("WORLD_SIZE {} is not a multiple of LOCAL_WORLD_SIZE {}",
                                   *world_size, *local_world_size));
  }
  if (rank && local_rank && local_world_size && group_rank &&
      *rank != *group_rank * *local_world_size + *local_rank) {
    problems.push_back(fmt::format("RANK {} != GROUP_RANK {} * LOCAL_WORLD_SIZE {} + LOCAL_RANK {}",
                                   *rank, *group_rank, *local_world_size, *local_rank));
  }
  if (master_port && (*master_port < 1 || *master_port > 65535)) {
    problems.push_back(fmt::format("MASTER_PORT {} is not in 1..65535", *master_port));
  }
  const std::string master_addr = env::text("MASTER_ADDR").value_or("");
  if (master_addr.empty()) problems.push_back("MASTER_ADDR is empty");
  if (env::text("COLO_LAUNCHER") != std::optional<std::string>("colo-run")) {
    problems.push_back("COLO_LAUNCHER is not 'colo-run'");
  }
  try {
    if (!env::secret("COLO_JOB_TOKEN", env::kMinJobTokenLength)) problems.push_back("COLO_JOB_TOKEN is not set");
  } catch (const env::VariableError& e) {
    problems.push_back(e.what());
  }
  if (const std::optional<std::string> rdzv = env::text("COLO_RDZV_FILE")) {
    // Nobody rendezvoused yet, so the store file must not exist, but its directory must.
    const std::string dir = files::parent_path(*rdzv);
    if (files::lexists(*rdzv))
      problems.push_back(fmt::format("COLO_RDZV_FILE '{}' already exists", *rdzv));
    if (!files::is_directory(dir)) {
      problems.push_back(fmt::format("COLO_RDZV_FILE's directory '{}' does not exist", dir));
    }
  }
  // The launcher's stop and cleanup guarantees rest on these two.
  if (::getpgrp() != ::getpid()) problems.push_back("the rank does not lead its own process group");
  int deathsig = 0;
  if (::prctl(PR_GET_PDEATHSIG, &deathsig) != 0 || deathsig != SIGKILL) {
    problems.push_back(fmt::format("PR_SET_PDEATHSIG is {}, not SIGKILL", deathsig));
  }
  if (rank) {
    const std::string marker = check_dir + "/rank-" + std::to_string(*rank);
    int fd = ::open(marker.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0) {
      problems.push_back(fmt::format("cannot create '{}': {} (another rank has RANK {}?)", marker,
                                     errno_text(errno), *rank));
    } else {
      ::close(fd);
    }
  }

  if (!problems.empty()) {
    print_to(STDERR_FILENO, "check failed: {}\n", fmt::join(problems, "; "));
    return 1;
  }
  print_to(STDOUT_FILENO,
           "environment ok: rank {} of {}, local rank {} of {}, node {}, master {}:{}\n", *rank,
           *world_size, *local_rank, *local_world_size, *group_rank, master_addr, *master_port);
  return 0;
}


}  // namespace colo::launcher
