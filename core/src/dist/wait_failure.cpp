#include "wait_failure.h"

#include "collective_progress.h"
#include "peer_addresses.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <optional>

namespace colo::dist {
namespace {

// Gloo's message for a timed-out transfer ("Timed out waiting 1500ms for recv operation ...").
bool says_timed_out(const std::string& what) { return what.find("imed out") != std::string::npos; }

// Gloo's messages for a peer's socket that closed or was reset.
bool says_connection_lost(const std::string& what) {
  return what.find("Connection closed by peer") != std::string::npos ||
         what.find("Connection reset by peer") != std::string::npos;
}

// How long reading the members' progress may add to a failure: the store answers in
// milliseconds unless its server (global rank 0) is the process that is stuck.
constexpr std::chrono::milliseconds kProgressReadLimit{std::chrono::seconds(5)};

// Best effort: a note that cannot be written changes only colo-run's choice of words.
void leave_lost_peer_note(const std::string& run_reports, int rank, int peer) {
  const std::string path = lost_peer_note_path(run_reports, rank);
  const std::string partial = path + ".partial";
  const int fd = ::open(partial.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) return;
  const std::string text = std::to_string(peer) + "\n";
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  if (!written || ::rename(partial.c_str(), path.c_str()) != 0) ::unlink(partial.c_str());
}

}  // namespace

std::string lost_peer_note_path(const std::string& run_reports, int rank) {
  return fmt::format("{}/lost-peer.{}", run_reports, rank);
}

std::string explain_failed_wait(const FailedWait& f, CollectiveProgress& progress, const PeerAddresses& peers) {
  // After a slow wait, every member that arrived has had the time to say so; a failure that came
  // at once (a peer's closed connection) would find them silent.
  if (f.sequence > 0 && (f.recorded || says_timed_out(f.what))) {
    if (!f.recorded) progress.record_waiting(f.sequence, f.op);  // for the others
    return fmt::format("{} #{} on group {} failed: {}. {}", f.op, f.sequence, f.group, f.what,
                       progress.describe_absent(f.sequence, f.op, std::min(f.timeout, kProgressReadLimit)));
  }
  std::optional<int> lost;
  const std::string what = peers.name_members(f.what, f.global_ranks, &lost);
  // Gloo names the socket's peer, which is the member's published address only where this rank
  // made the connection; where the member connected to this rank it is that member's ephemeral
  // port. In a group of two the lost connection can only be to the other member.
  if (!lost && f.global_ranks.size() == 2 && says_connection_lost(f.what)) {
    lost = f.global_ranks[0] == f.global_rank ? 1 : 0;
  }
  if (!lost) {
    // A connection that went away at an address no member published (see above): the note says a
    // peer was lost, not which, so that colo-run still waits for the rank that failed first
    // rather than naming this one.
    if (!f.run_reports.empty() && says_connection_lost(f.what)) leave_lost_peer_note(f.run_reports, f.global_rank, -1);
    return fmt::format("{} on group {} failed: {} (a peer may have died or be stuck; its own log says why)", f.op,
                       f.group, what);
  }
  const int lost_global = f.global_ranks[static_cast<std::size_t>(*lost)];
  if (!f.run_reports.empty()) leave_lost_peer_note(f.run_reports, f.global_rank, lost_global);
  return fmt::format(
      "{} on group {} failed: {}: the connection to rank {} (global {}) went away; it died, or closed the group "
      "while this rank still needed it, and its own log says why",
      f.op, f.group, what, *lost, lost_global);
}

}  // namespace colo::dist
