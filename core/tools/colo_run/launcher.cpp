// What launcher.h declares and no single part of colo-run owns: the choice between a job and the
// self-check, the environment every rank gets, and the free port. The parts: command_line.cpp
// (parse_args, usage), job.cpp (the supervisor), self_check.cpp (--check), posix.cpp.
#include "launcher.h"

#include <colo/env/elastic.h>
#include <colo/files/files.h>
#include <fmt/ranges.h>
#include <fmt/format.h>
#include <netdb.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <fstream>
#include <algorithm>
#include <set>

#include "job.h"
#include "posix.h"
#include "self_check.h"

namespace colo::launcher {

EnvVars make_rank_env(const LaunchConfig& config, int local_rank) {
  if (config.master_port < 1 || config.master_port > 65535) {
    throw std::invalid_argument(fmt::format(
        "make_rank_env: master_port {} is not a port; resolve it (pick_free_port) first",
        config.master_port));
  }
  if (config.rdzv_file == "auto") {
    throw std::invalid_argument("make_rank_env: rdzv_file 'auto' must be resolved to a path first");
  }
  if (local_rank < 0 || local_rank >= config.nproc_per_node) {
    throw std::invalid_argument(fmt::format("make_rank_env: local rank {} outside 0..{}",
                                            local_rank, config.nproc_per_node - 1));
  }
  EnvVars env = {
      {"RANK", std::to_string(first_rank_of(config) + local_rank)},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"WORLD_SIZE", std::to_string(world_size_of(config))},
      {"LOCAL_WORLD_SIZE", std::to_string(config.nproc_per_node)},
      {"GROUP_RANK", std::to_string(config.node_rank)},
      {"MASTER_ADDR", config.master_addr},
      {"MASTER_PORT", std::to_string(config.master_port)},
      {"COLO_LAUNCHER", "colo-run"},
      {"COLO_RESTART_COUNT", std::to_string(config.restart_count)},
  };
  if (!config.rdzv_file.empty()) env.emplace_back("COLO_RDZV_FILE", config.rdzv_file);
  if (!config.job_token.empty()) env.emplace_back("COLO_JOB_TOKEN", config.job_token);
  if (!config.run_reports.empty()) env.emplace_back("COLO_RUN_REPORTS", config.run_reports);
  // colo's Logger then leaves out the "[rank R] " colo-run puts before every line anyway.
  if (config.prefix_output) env.emplace_back("COLO_RUN_PREFIXES_OUTPUT", "1");
  if (config.elastic_max > 0) {
    env.emplace_back(env::kElasticMaxWorldVariable, std::to_string(config.nnodes * config.elastic_max));
  }
  if (!config.elastic_devices.empty()) {
    env.emplace_back("CUDA_VISIBLE_DEVICES", fmt::format("{}", fmt::join(config.elastic_devices, ",")));
  }
  return env;
}

std::vector<std::string> rank_environment(const LaunchConfig& config, int local_rank, char** environ_entries) {
  // The variables colo-run owns. Copies inherited from colo-run's own environment are dropped so
  // that a rank never sees a mix of two launches.
  static const std::set<std::string> owned = {
      "RANK",        "LOCAL_RANK",  "WORLD_SIZE",    "LOCAL_WORLD_SIZE", "GROUP_RANK",
      "MASTER_ADDR", "MASTER_PORT", "COLO_LAUNCHER", "COLO_RDZV_FILE",   "COLO_JOB_TOKEN",
      "COLO_RUN_REPORTS", "COLO_RESTART_COUNT", env::kElasticMaxWorldVariable, "COLO_RUN_PREFIXES_OUTPUT"};
  // And what this attempt sets besides (CUDA_VISIBLE_DEVICES once --elastic left a GPU out).
  const EnvVars set = make_rank_env(config, local_rank);
  auto set_here = [&](const std::string& name) {
    return std::any_of(set.begin(), set.end(), [&](const auto& variable) { return variable.first == name; });
  };
  std::vector<std::string> entries;
  for (char** entry = environ_entries; *entry != nullptr; ++entry) {
    std::string item = *entry;
    const std::string name = item.substr(0, item.find('='));
    if (owned.count(name) == 0 && !set_here(name)) entries.push_back(std::move(item));
  }
  for (const auto& [name, value] : set) entries.push_back(name + "=" + value);
  // The NCCL watchdog's defaults (launcher.h), all or none: a user who configures any of them
  // (or the flight recorder) gets exactly what they set.
  auto given = [&](const std::string& name) {
    return std::any_of(entries.begin(), entries.end(),
                       [&](const std::string& item) { return item.rfind(name + "=", 0) == 0; });
  };
  bool user_configured = given(kNcclTraceBufferVariable);
  for (const auto& [name, value] : kNcclWatchdogDefaults) user_configured = user_configured || given(name);
  if (!user_configured) {
    for (const auto& [name, value] : kNcclWatchdogDefaults) entries.push_back(std::string(name) + "=" + value);
  }
  return entries;
}

std::optional<int> lost_peer_of(const std::string& run_reports, int rank) {
  if (run_reports.empty()) return std::nullopt;
  const std::string path = files::join(run_reports, fmt::format("lost-peer.{}", rank));
  // A note is left at every failure that names a peer, including one the program caught and
  // survived: only a recent one explains the rank's exit.
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0 || ::time(nullptr) - info.st_mtime > kLostPeerNoteLifetimeS) {
    return std::nullopt;
  }
  std::ifstream note(path);
  int peer = -2;
  if (!(note >> peer) || peer < kUnknownPeer) return std::nullopt;
  return peer;
}

int pick_free_port(const std::string& addr) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(addr.c_str(), "0", &hints, &found); rc != 0) {
    throw std::runtime_error(
        fmt::format("cannot resolve --master-addr '{}': {}", addr, ::gai_strerror(rc)));
  }
  std::string last_error = "no usable address";
  int port = 0;
  for (addrinfo* ai = found; ai != nullptr && port == 0; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last_error = errno_text(errno);
      continue;
    }
    sockaddr_storage bound{};
    socklen_t length = sizeof bound;
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length) == 0) {
      port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                         : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    } else {
      last_error = errno_text(errno);
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  if (port == 0) {
    throw std::runtime_error(
        fmt::format("cannot find a free port on --master-addr '{}': {}. Is "
                    "the address one of this machine's? Or pass "
                    "--master-port",
                    addr, last_error));
  }
  return port;
}

int run(LaunchConfig config) {
  return config.self_check ? run_self_check(std::move(config)) : run_job(std::move(config));
}


}  // namespace colo::launcher
