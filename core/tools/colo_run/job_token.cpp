#include "job_token.h"

#include <colo/env/variables.h>
#include <fmt/format.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>

#include "hmac_sha256.h"
#include "output.h"
#include "posix.h"

namespace colo::launcher {

std::string new_job_token() {
  unsigned char bytes[32];
  std::size_t filled = 0;
  while (filled < sizeof bytes) {
    const ssize_t n = ::getrandom(bytes + filled, sizeof bytes - filled, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error("cannot make a job token: getrandom failed: " + errno_text(errno));
    filled += static_cast<std::size_t>(n);
  }
  std::string token;
  for (unsigned char b : bytes) token += fmt::format("{:02x}", b);
  return token;
}

std::string resolve_job_token(const LaunchConfig& config) {
  try {
    if (auto given = env::secret("COLO_JOB_TOKEN", env::kMinJobTokenLength)) return *given;
  } catch (const env::VariableError& e) {
    throw UsageError(fmt::format("{} (colo-run --new-token makes one)", e.what()));
  }
  if (config.node_rank > 0) {
    throw UsageError(fmt::format(
        "--node-rank {} needs the job's token: set COLO_JOB_TOKEN in colo-run's environment to the token node 0 "
        "uses (node 0's colo-run prints the one it makes; or make one with 'colo-run --new-token' and give it to "
        "every node). A rank without it is not admitted",
        config.node_rank));
  }
  std::string token = new_job_token();
  if (config.nnodes > 1) {
    print_to(STDERR_FILENO,
             "colo-run: made this job's token; start the colo-run of every other node with COLO_JOB_TOKEN={} in its "
             "environment (its ranks are admitted with it)\n",
             token);
  }
  return token;
}

std::string restart_job_token(const std::string& job_token, int restart_count) {
  if (restart_count == 0) return job_token;
  return dist::to_hex(dist::hmac_sha256(job_token, fmt::format("colo-run restart {}", restart_count)));
}

}  // namespace colo::launcher
