// Work: the handle of one collective or point-to-point operation, and how a rank waits for it
// (NCCL: the stream waits, the watchdog enforces the timeout; Gloo: a bounded wait that records
// a slow arrival and explains a failed one). ProcessGroup's operations make them
// (process_group.cpp).
#include <colo/dist/errors.h>
#include <colo/dist/process_group.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <string>

#include "collective_progress.h"
#include "process_group_impl.h"
#include "wait_failure.h"

namespace colo::dist {

namespace {

// Waits up to `limit` (at least 1 ms: c10d reads 0 as "no timeout") for `work`. False when it is
// still running; a failure of the work itself is rethrown. c10d's wait throws on a timeout
// ("Operation timed out!") rather than returning false, so a throw while the work is not
// completed is the timeout.
bool completes_within(c10d::Work& work, std::chrono::milliseconds limit) {
  try {
    if (work.wait(std::max(limit, std::chrono::milliseconds(1)))) return true;
    if (!work.isCompleted()) return false;
  } catch (...) {
    if (!work.isCompleted()) return false;
  }
  work.wait();  // completed meanwhile: returns, or rethrows the work's own failure
  return true;
}

}  // namespace

void Work::wait() {
  if (!state_ || state_->done) return;
  State& s = *state_;
  const ProcessGroup* group = s.group;
  try {
    if (group->backend() == Backend::kNccl) {
      // Without a timeout, NCCL's wait only makes the current CUDA stream wait for the
      // collective; with one, it also blocks this thread until the collective ends, so the host
      // could not queue the work that follows ahead of the GPU. (On 2 H200s, ViT-B/16 torch_ddp,
      // the step time did not measurably change: the host was far enough ahead either way.)
      // Timeouts stay enforced: the NCCL watchdog applies the group's timeout (set on every
      // collective) and ends the process, which colo-run reports with the rank that stopped.
      for (auto& w : s.works) {
        if (w) w->wait();
      }
    } else {
      // A numbered collective that is still running after a tenth of the timeout records that
      // this rank has arrived (CollectiveProgress); a quick one touches nothing but the work.
      const auto timeout = group->timeout();
      const auto slow = CollectiveProgress::slow_wait(timeout);
      for (auto& w : s.works) {
        if (!w) continue;
        if (s.sequence > 0 && completes_within(*w, slow)) continue;
        if (s.sequence > 0 && !s.recorded) {
          group->impl_->progress->record_waiting(s.sequence, s.op);
          s.recorded = true;
        }
        if (!completes_within(*w, s.sequence > 0 ? timeout - slow : timeout)) {
          throw DistError(fmt::format("timed out after {} ms", timeout.count()));
        }
      }
    }
  } catch (const std::exception& e) {
    s.done = true;
    std::string what = e.what();
    what = what.substr(0, what.find("\nException raised from"));  // drop c10's C++ stack trace
    FailedWait failure;
    failure.op = s.op;
    failure.sequence = s.sequence;
    failure.recorded = s.recorded;
    failure.what = what;
    failure.group = group->describe();
    failure.timeout = group->timeout();
    failure.global_ranks = group->global_ranks();
    failure.global_rank = group->global_rank(group->rank());
    failure.run_reports = group->impl_->run_reports;
    throw DistError(explain_failed_wait(failure, *group->impl_->progress, group->impl_->peers));
  }
  s.done = true;
  if (s.on_complete) s.on_complete();
}

bool Work::is_completed() {
  if (!state_) return true;
  for (auto& w : state_->works) {
    if (w && !w->isCompleted()) return false;
  }
  return true;
}

}  // namespace colo::dist
