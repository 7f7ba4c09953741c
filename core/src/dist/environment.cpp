#include <colo/dist/environment.h>

#include <fmt/format.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace colo::dist {
namespace {

using Lookup = std::function<const char*(const char*)>;

int parse_int(const Lookup& get, const char* name) {
  const char* raw = get(name);
  const std::string text = raw ? raw : "";
  try {
    size_t used = 0;
    const int value = std::stoi(text, &used);
    if (used == text.size()) return value;
  } catch (const std::exception&) {
  }
  throw std::invalid_argument(
      fmt::format("environment variable {}='{}' is not an integer; unset it or give a whole number", name, text));
}

int int_or(const Lookup& get, const char* name, int fallback) { return get(name) ? parse_int(get, name) : fallback; }

std::string string_or(const Lookup& get, const char* name, const std::string& fallback) {
  const char* raw = get(name);
  return raw && *raw ? std::string(raw) : fallback;
}

// First host of a SLURM node list: "gpu[03-05,09],cpu1" -> "gpu03". Enough to find rank 0's
// node, which SLURM always places first.
std::string first_slurm_host(const std::string& list) {
  const auto bracket = list.find('[');
  const auto comma = list.find(',');
  if (bracket == std::string::npos || (comma != std::string::npos && comma < bracket)) {
    return list.substr(0, comma);
  }
  const std::string prefix = list.substr(0, bracket);
  const auto end = list.find_first_of(",-]", bracket + 1);
  return prefix + list.substr(bracket + 1, end - bracket - 1);
}

// SLURM_STEP_TASKS_PER_NODE looks like "4(x2),3": the first node's count is what we need, since
// local world sizes differ only on uneven allocations.
int first_slurm_count(const std::string& tasks_per_node) {
  try {
    return std::stoi(tasks_per_node);
  } catch (const std::exception&) {
    return 1;
  }
}

void validate(const Environment& env) {
  if (env.world_size < 1) {
    throw std::invalid_argument(fmt::format("world size {} (from {}) must be at least 1", env.world_size, env.launcher));
  }
  if (env.rank < 0 || env.rank >= env.world_size) {
    throw std::invalid_argument(fmt::format("rank {} is outside [0, {}) (from {}); check the launcher's variables",
                                            env.rank, env.world_size, env.launcher));
  }
  if (env.local_rank < 0 || env.local_rank >= env.local_world_size) {
    throw std::invalid_argument(fmt::format("local rank {} is outside [0, {}) (from {})", env.local_rank,
                                            env.local_world_size, env.launcher));
  }
  if (env.master_port <= 0 || env.master_port > 65535) {
    throw std::invalid_argument(fmt::format("MASTER_PORT={} is not a TCP port (1..65535)", env.master_port));
  }
}

}  // namespace

Environment Environment::from_lookup(const Lookup& get) {
  Environment env;
  if (get("RANK")) {  // colo-run, torchrun, or hand-set variables
    env.launcher = get("COLO_LAUNCHER") ? string_or(get, "COLO_LAUNCHER", "colo-run")
                   : get("TORCHELASTIC_RUN_ID") ? "torchrun"
                                                : "env";
    env.rank = parse_int(get, "RANK");
    env.world_size = int_or(get, "WORLD_SIZE", 1);
    env.local_rank = int_or(get, "LOCAL_RANK", env.rank);
    env.local_world_size = int_or(get, "LOCAL_WORLD_SIZE", env.world_size);
  } else if (get("SLURM_PROCID") && get("SLURM_NTASKS")) {
    env.launcher = "slurm";
    env.rank = parse_int(get, "SLURM_PROCID");
    env.world_size = parse_int(get, "SLURM_NTASKS");
    env.local_rank = int_or(get, "SLURM_LOCALID", 0);
    env.local_world_size = first_slurm_count(string_or(get, "SLURM_STEP_TASKS_PER_NODE",
                                                       string_or(get, "SLURM_NTASKS_PER_NODE", "1")));
    const std::string nodes = string_or(get, "SLURM_STEP_NODELIST", string_or(get, "SLURM_NODELIST", ""));
    if (!nodes.empty()) env.master_addr = first_slurm_host(nodes);
  } else if (get("OMPI_COMM_WORLD_RANK")) {
    env.launcher = "openmpi";
    env.rank = parse_int(get, "OMPI_COMM_WORLD_RANK");
    env.world_size = int_or(get, "OMPI_COMM_WORLD_SIZE", 1);
    env.local_rank = int_or(get, "OMPI_COMM_WORLD_LOCAL_RANK", 0);
    env.local_world_size = int_or(get, "OMPI_COMM_WORLD_LOCAL_SIZE", 1);
  }
  env.master_addr = string_or(get, "MASTER_ADDR", env.master_addr);
  env.master_port = int_or(get, "MASTER_PORT", env.master_port);
  env.rdzv_file = string_or(get, "COLO_RDZV_FILE", "");
  validate(env);
  return env;
}

Environment Environment::from_env() {
  return from_lookup([](const char* name) { return std::getenv(name); });
}

}  // namespace colo::dist
