#include <colo/dist/environment.h>
#include <colo/env/variables.h>

#include <fmt/format.h>

#include <climits>
#include <string>

namespace colo::dist {
namespace {

using Lookup = env::Lookup;

int rank_variable(const Lookup& get, const char* name) {
  return static_cast<int>(*env::integer(name, 0, INT_MAX - 1, "a rank (counted from 0)", get));
}
int size_variable(const Lookup& get, const char* name) {
  return static_cast<int>(*env::integer(name, 1, INT_MAX, "processes", get));
}
int rank_or(const Lookup& get, const char* name, int fallback) {
  return static_cast<int>(env::integer(name, 0, INT_MAX - 1, "a rank (counted from 0)", get).value_or(fallback));
}
int size_or(const Lookup& get, const char* name, int fallback) {
  return static_cast<int>(env::integer(name, 1, INT_MAX, "processes", get).value_or(fallback));
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
// local world sizes differ only on uneven allocations. The count is read as every other number.
int first_slurm_count(const Lookup& get, const char* name) {
  const std::optional<std::string> list = env::text(name, get);
  if (!list) return 0;
  const std::string first = list->substr(0, list->find_first_of("(,"));
  try {
    return size_variable([&](const char*) { return first.c_str(); }, name);
  } catch (const env::VariableError&) {
    throw env::VariableError(fmt::format("environment variable {}='{}' does not start with a number of tasks "
                                         "(SLURM writes it as '4(x2),3'); fix it or unset it",
                                         name, *list));
  }
}

void validate(const Environment& env) {
  if (env.rank >= env.world_size) {
    throw env::VariableError(fmt::format("rank {} is outside [0, {}) (from {}); check the launcher's variables",
                                         env.rank, env.world_size, env.launcher));
  }
  if (env.local_rank >= env.local_world_size) {
    throw env::VariableError(fmt::format("local rank {} is outside [0, {}) (from {})", env.local_rank,
                                         env.local_world_size, env.launcher));
  }
}

}  // namespace

std::optional<std::chrono::milliseconds> Environment::timeout_from(const Lookup& get) {
  const auto ms = env::timeout_ms(get);
  if (!ms) return std::nullopt;
  return std::chrono::milliseconds(*ms);
}

Environment Environment::from_lookup(const Lookup& get) {
  Environment env;
  if (env::text("RANK", get)) {  // colo-run, torchrun, or hand-set variables
    env.launcher = env::text("COLO_LAUNCHER", get) ? *env::text("COLO_LAUNCHER", get)
                   : env::text("TORCHELASTIC_RUN_ID", get) ? "torchrun"
                                                            : "env";
    env.rank = rank_variable(get, "RANK");
    env.world_size = size_or(get, "WORLD_SIZE", 1);
    env.local_rank = rank_or(get, "LOCAL_RANK", env.rank);
    env.local_world_size = size_or(get, "LOCAL_WORLD_SIZE", env.world_size);
  } else if (env::text("SLURM_PROCID", get) && env::text("SLURM_NTASKS", get)) {
    env.launcher = "slurm";
    env.rank = rank_variable(get, "SLURM_PROCID");
    env.world_size = size_variable(get, "SLURM_NTASKS");
    env.local_rank = rank_or(get, "SLURM_LOCALID", 0);
    const int step_tasks = first_slurm_count(get, "SLURM_STEP_TASKS_PER_NODE");
    env.local_world_size = step_tasks > 0 ? step_tasks : size_or(get, "SLURM_NTASKS_PER_NODE", 1);
    const std::string nodes =
        env::text("SLURM_STEP_NODELIST", get).value_or(env::text("SLURM_NODELIST", get).value_or(""));
    if (!nodes.empty()) env.master_addr = first_slurm_host(nodes);
  } else if (env::text("OMPI_COMM_WORLD_RANK", get)) {
    env.launcher = "openmpi";
    env.rank = rank_variable(get, "OMPI_COMM_WORLD_RANK");
    env.world_size = size_or(get, "OMPI_COMM_WORLD_SIZE", 1);
    env.local_rank = rank_or(get, "OMPI_COMM_WORLD_LOCAL_RANK", 0);
    env.local_world_size = size_or(get, "OMPI_COMM_WORLD_LOCAL_SIZE", 1);
  }
  env.master_addr = env::text("MASTER_ADDR", get).value_or(env.master_addr);
  env.master_port = static_cast<int>(
      env::integer("MASTER_PORT", 1, 65535, "a TCP port", get).value_or(env.master_port));
  env.rdzv_file = env::text("COLO_RDZV_FILE", get).value_or("");
  env.timeout = timeout_from(get);
  env.job_token = env::secret("COLO_JOB_TOKEN", env::kMinJobTokenLength, get).value_or("");
  env.run_reports = env::text("COLO_RUN_REPORTS", get).value_or("");
  validate(env);
  return env;
}

Environment Environment::from_env() { return from_lookup(env::process_environment()); }

}  // namespace colo::dist
