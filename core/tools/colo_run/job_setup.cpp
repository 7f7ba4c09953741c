// run_job: what a job needs before its ranks start (job.h).
#include <colo/env/variables.h>
#include <colo/files/files.h>
#include <fmt/format.h>
#include <unistd.h>

#include <optional>

#include "job.h"
#include "job_token.h"
#include "node_capacity.h"
#include "output.h"

namespace colo::launcher {

int run_job(LaunchConfig config) {
  try {
    // Checked here, before any rank starts, as every rank would check it.
    config.timeout_ms = env::timeout_ms().value_or(env::kDefaultTimeoutMs);
  } catch (const env::VariableError& e) {
    throw UsageError(e.what());
  }
  if (config.job_token.empty()) config.job_token = resolve_job_token(config);
  if (config.master_port == 0) config.master_port = pick_free_port(config.master_addr);

  std::optional<files::TemporaryDirectory> rdzv_dir;
  if (config.rdzv_file == "auto") {
    // A fresh directory makes the path unique and guarantees the file does not exist yet; made
    // by mkdtemp, it is this user's alone (mode 0700).
    rdzv_dir.emplace("colo-rdzv-");
    config.rdzv_file = rdzv_dir->file("store");
  } else if (!config.rdzv_file.empty()) {
    if (files::lexists(config.rdzv_file)) {
      throw UsageError(fmt::format(
          "--rdzv-file '{}' already exists: a FileStore would read an earlier job's keys from "
          "it. Remove it, or use --rdzv-file auto",
          config.rdzv_file));
    }
    const std::string dir = files::parent_path(config.rdzv_file);
    if (!files::is_directory(dir)) {
      throw UsageError(
          fmt::format("--rdzv-file '{}': directory '{}' does not exist", config.rdzv_file, dir));
    }
  }
  // Where ranks leave notes for colo-run (lost peers); removed with the job.
  files::TemporaryDirectory reports("colo-run-");
  config.run_reports = reports.path();

  // Said before the ranks start, so that it comes first and not amid their output.
  if (auto warning = oversubscription_warning(config.nproc_per_node, node_capacity())) {
    print_to(STDERR_FILENO, "{}\n", *warning);
  }
  const int code = supervise(config);
  // The last FileStore user normally deletes the file; after a failure nobody did.
  if (!config.rdzv_file.empty() && !rdzv_dir) ::unlink(config.rdzv_file.c_str());
  return code;
}

}  // namespace colo::launcher
