// run_job: what a job needs before its ranks start (job.h), and its restarts (--max-restarts).
#include <colo/env/variables.h>
#include <colo/files/files.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "elastic_slots.h"
#include "job.h"
#include "job_token.h"
#include "node_capacity.h"
#include "output.h"

namespace colo::launcher {
namespace {


// How one attempt ended, and under --elastic what its ranks said in their notes.
struct Attempt {
  JobOutcome outcome;
  ElasticNotes notes;
};

// One attempt: its own store file (in a fresh directory, with "auto"), its own port where
// colo-run picked it, its own report directory and its own token, so that a process left from an
// earlier attempt (one that escaped colo-run's stop) cannot join this one's rendezvous.
Attempt run_attempt(LaunchConfig config, const LaunchConfig& given, NodeLink* link = nullptr) {
  if (config.restart_count > 0) {
    config.job_token = restart_job_token(config.job_token, config.restart_count);
    if (given.master_port == 0) config.master_port = pick_free_port(config.master_addr);
  }
  std::optional<files::TemporaryDirectory> rdzv_dir;
  if (given.rdzv_file == "auto") {
    // A fresh directory makes the path unique and guarantees the file does not exist yet; made
    // by mkdtemp, it is this user's alone (mode 0700).
    rdzv_dir.emplace("colo-rdzv-");
    config.rdzv_file = rdzv_dir->file("store");
  } else if (!config.rdzv_file.empty() && files::lexists(config.rdzv_file)) {
    // Only possible on a restart (checked before the first): what an earlier attempt left.
    ::unlink(config.rdzv_file.c_str());
  }
  // Where ranks leave notes for colo-run (lost peers); removed with the attempt.
  files::TemporaryDirectory reports("colo-run-");
  config.run_reports = reports.path();
  Attempt attempt{supervise(config, link), {}};
  if (config.elastic_max > 0 && attempt.outcome.rank_failed) attempt.notes = read_elastic_notes(config);
  // The last FileStore user normally deletes the file; after a failure nobody did.
  if (!config.rdzv_file.empty() && !rdzv_dir) ::unlink(config.rdzv_file.c_str());
  return attempt;
}

// What this node runs of an attempt, as node 0 assigned it: its ranks, their global numbers and
// the world; under --elastic the GPUs of its first live slots.
void take_share(LaunchConfig& config, const NodeShare& share, const std::optional<ElasticSlots>& slots) {
  if (slots) {
    slots->configure(config, share.local_size);
  } else {
    config.nproc_per_node = share.local_size;
  }
  config.first_rank = share.first_rank;
  config.world_size = share.world_size;
}

// "; this node runs ranks 2-3 of 4" and the like, for the restart line under --elastic.
std::string share_text(const NodeShare& share) {
  if (share.local_size == 0) return fmt::format("; this node sits it out (a world of {})", share.world_size);
  return fmt::format("; this node runs rank{} {} of {}", share.local_size == 1 ? "" : "s",
                     share.local_size == 1 ? std::to_string(share.first_rank)
                                           : fmt::format("{}-{}", share.first_rank, share.first_rank + share.local_size - 1),
                     share.world_size);
}

// --max-restarts with --nnodes > 1: every attempt starts and ends on every node together, as node
// 0's colo-run decides (node_link.h); node 0's --max-restarts governs and, under --elastic, node 0
// chooses each attempt's world from every node's live slots.
int run_linked_job(LaunchConfig& config, const LaunchConfig& given) {
  std::optional<ElasticSlots> slots;
  if (config.elastic_max > 0) slots.emplace(config, split_devices(std::getenv("CUDA_VISIBLE_DEVICES")));
  std::optional<NodeLink> link;
  try {
    link.emplace(config);
  } catch (const std::runtime_error& e) {
    print_to(STDERR_FILENO, "colo-run: {}\n", e.what());
    return 1;
  }
  const NodeVerdict first = link->start();
  if (!first.restart) {
    print_to(STDERR_FILENO, "colo-run: node 0 ended the job before it started: {}\n", first.why);
    return first.exit_code;
  }
  take_share(config, first.share, slots);
  for (;;) {
    const auto started = std::chrono::steady_clock::now();
    Attempt attempt;
    if (config.nproc_per_node > 0) attempt = run_attempt(config, given, &*link);
    const JobOutcome& outcome = attempt.outcome;
    const char* kind = outcome.stopped_by_link ? "stopped"
                       : outcome.exit_code == 0 ? "ok"
                       : outcome.rank_failed    ? "failed"
                                                : "fatal";
    NodeReport report{outcome.exit_code, kind, outcome.cause, config.nproc_per_node, false};
    if (slots) {
      if (outcome.rank_failed) {
        for (const auto& line : slots->take(attempt.notes, config.nproc_per_node)) print_to(STDERR_FILENO, "colo-run: {}\n", line);
      }
      report.slots = slots->live();
      report.refused_world = attempt.notes.world_size_unusable.has_value();
    }
    const NodeVerdict verdict = link->finish(report);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (!verdict.restart) {
      if (!verdict.why.empty()) print_to(STDERR_FILENO, "colo-run: the job ended after {:.1f} s: {}\n", seconds, verdict.why);
      return verdict.exit_code;
    }
    config.restart_count = verdict.next_attempt;
    take_share(config, verdict.share, slots);
    print_to(STDERR_FILENO,
             "colo-run: restart {} of {} (COLO_RESTART_COUNT={}): starting this node's ranks again, with every "
             "node's, after {:.1f} s, because {}{}\n",
             config.restart_count, config.max_restarts, config.restart_count, seconds, verdict.why,
             slots ? share_text(verdict.share) : std::string());
  }
}

}  // namespace

int run_job(LaunchConfig config) {
  try {
    // Checked here, before any rank starts, as every rank would check it.
    config.timeout_ms = env::timeout_ms().value_or(env::kDefaultTimeoutMs);
  } catch (const env::VariableError& e) {
    throw UsageError(e.what());
  }
  if (config.job_token.empty()) config.job_token = resolve_job_token(config);
  const LaunchConfig given = config;  // before the port is picked: each restart picks its own
  if (config.master_port == 0) config.master_port = pick_free_port(config.master_addr);

  if (config.rdzv_file != "auto" && !config.rdzv_file.empty()) {
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

  // Said before the ranks start, so that it comes first and not amid their output.
  if (auto warning = oversubscription_warning(config.nproc_per_node, node_capacity())) {
    print_to(STDERR_FILENO, "{}\n", *warning);
  }
  if (config.nnodes > 1 && config.max_restarts > 0) return run_linked_job(config, given);
  std::optional<ElasticSlots> slots;
  if (config.elastic_max > 0) slots.emplace(config, split_devices(std::getenv("CUDA_VISIBLE_DEVICES")));
  for (;;) {
    const auto started = std::chrono::steady_clock::now();
    const int attempt_size = config.nproc_per_node;
    const Attempt attempt = run_attempt(config, given);
    const JobOutcome& outcome = attempt.outcome;
    if (outcome.exit_code == 0 || !outcome.rank_failed || config.max_restarts == 0) return outcome.exit_code;
    std::vector<std::string> elastic_said;
    if (slots) elastic_said = slots->take(attempt.notes, attempt_size);
    for (const auto& line : elastic_said) print_to(STDERR_FILENO, "colo-run: {}\n", line);
    // A program that refused this world (it says so in a note, with a usage error's status) may
    // run on a smaller one; any other usage error would fail again.
    const bool refused_world = slots && attempt.notes.world_size_unusable.has_value();
    if (outcome.exit_code == kUsageErrorStatus && !refused_world) {
      print_to(STDERR_FILENO,
               "colo-run: not restarting: a rank exited with status {}, a usage error (the same command would fail "
               "again); fix what it said\n",
               kUsageErrorStatus);
      return outcome.exit_code;
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (slots && slots->size() < slots->min()) {
      print_to(STDERR_FILENO,
               "colo-run: elastic: stopping: {}, fewer than --elastic's MIN {}; the last failure, after {:.1f} s: {}\n",
               slots->live() < slots->min()
                   ? fmt::format("only {} of the node's {} slots can start", slots->live(), config.elastic_max)
                   : fmt::format("the program cannot use more than {} rank{} here", slots->cap(), slots->cap() == 1 ? "" : "s"),
               slots->min(), seconds, outcome.cause);
      return outcome.exit_code;
    }
    if (config.restart_count >= config.max_restarts) {
      print_to(STDERR_FILENO,
               "colo-run: the job failed and its restarts are spent (--max-restarts {}: {} attempts in all); the "
               "last failure, after {:.1f} s: {}\n",
               config.max_restarts, config.restart_count + 1, seconds, outcome.cause);
      return outcome.exit_code;
    }
    ++config.restart_count;
    if (slots) slots->configure(config, slots->size());
    print_to(STDERR_FILENO,
             "colo-run: restart {} of {} (COLO_RESTART_COUNT={}): starting {} again after {:.1f} s, because {}\n",
             config.restart_count, config.max_restarts, config.restart_count,
             !slots ? std::string("every rank")
                    : fmt::format("{} of {} ranks{}", config.nproc_per_node, config.elastic_max,
                                  config.elastic_devices.empty()
                                      ? std::string()
                                      : fmt::format(" (CUDA_VISIBLE_DEVICES={})", fmt::join(config.elastic_devices, ","))),
             seconds, outcome.cause);
  }
}

}  // namespace colo::launcher
