#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace colo::dist {

class CollectiveProgress;
class PeerAddresses;

// What Work::wait knows when an operation failed, and the group's means to explain it.
struct FailedWait {
  std::string op;
  uint64_t sequence = 0;  // 0: a point-to-point operation (not numbered)
  bool recorded = false;  // this rank's arrival is in the store
  std::string what;       // the backend's words, c10's stack trace cut off
  std::string group;      // ProcessGroup::describe()
  std::chrono::milliseconds timeout{0};
  std::vector<int> global_ranks;  // the group's, by group rank
  int global_rank = 0;            // this process's
  std::string run_reports;        // COLO_RUN_REPORTS, or empty
};

// The DistError message for a failed wait. A timeout (or a slow wait's failure) names the members
// that did not arrive (CollectiveProgress); a failure that came at once names the member whose
// connection went away where the backend gave its address (PeerAddresses), and then also leaves
// colo-run a note that this rank's failure follows from that member's (see lost_peer_note_path).
// `progress` may be read (bounded), so this can take a few seconds.
std::string explain_failed_wait(const FailedWait& failure, CollectiveProgress& progress, const PeerAddresses& peers);

// Where a rank of global rank `rank` leaves the note in colo-run's directory `run_reports`: a
// file holding the global rank of the peer it lost. colo-run reads it when the rank fails, so
// that the peer that failed first, not this rank, is named as the job's cause.
std::string lost_peer_note_path(const std::string& run_reports, int rank);

}  // namespace colo::dist
