// NodeLink: the nodes' colo-runs agreeing on each restart (node_link.h says the protocol).
#include "node_link.h"
#include "node_link_peer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <limits>
#include <cerrno>
#include <sstream>
#include <stdexcept>

#include "output.h"

namespace colo::launcher {

namespace {

using node_link_detail::Clock;
using node_link_detail::milliseconds_until;
using node_link_detail::one_line;

// After a failure, how long node 0 waits beyond the grace period for a node to report that its
// ranks have exited (they are stopped with SIGTERM, then SIGKILL after the grace period).
constexpr auto kReportSlack = std::chrono::seconds(30);
}  // namespace

NodeLink::~NodeLink() {
  for (Peer& peer : peers_) {
    if (peer.fd >= 0) ::close(peer.fd);
  }
}

void NodeLink::send(Peer& peer, const std::string& line) {
  if (peer.lost) return;
  const std::string text = one_line(line) + "\n";
  std::size_t sent = 0;
  while (sent < text.size()) {
    const ssize_t n = ::send(peer.fd, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      peer.lost = true;  // read() reports it, with the words of the side that notices
      return;
    }
    sent += static_cast<std::size_t>(n);
  }
}

void NodeLink::begin(int attempt) {
  attempt_ = attempt;
  first_failure_.reset();
  first_failure_node_ = -1;
  for (Peer& peer : peers_) {
    peer.done.reset();
    peer.stop_sent = false;
  }
}

namespace {

// "go K W R L why" or "end CODE why", as node 0 sends them to another node.
NodeVerdict parse_word_of_node0(std::istringstream& words, const std::string& word) {
  NodeVerdict verdict;
  if (word == "go") {
    verdict.restart = true;
    words >> verdict.next_attempt >> verdict.share.world_size >> verdict.share.first_rank >> verdict.share.local_size;
  } else {
    words >> verdict.exit_code;
  }
  std::getline(words >> std::ws, verdict.why);
  return verdict;
}

}  // namespace

NodeVerdict NodeLink::start() {
  begin(0);
  if (config_.node_rank == 0) {
    world_cap_ = std::numeric_limits<int>::max();
    std::vector<std::string> said;
    std::string stop_why;
    if (auto share = assign_and_go(0, config_.nproc_per_node, "", said, stop_why)) {
      for (const auto& line : said) print_to(STDERR_FILENO, "colo-run: {}\n", line);
      return NodeVerdict{true, 0, *share, 0, ""};
    }
    return NodeVerdict{false, 0, {}, 1, stop_why};
  }
  ended_.reset();
  Peer& node0 = peers_.front();
  const auto line = node0.read_line(std::nullopt);
  if (!line) return NodeVerdict{false, 0, {}, 1, "lost node 0's colo-run before the first attempt"};
  std::istringstream words(*line);
  std::string word;
  words >> word;
  return parse_word_of_node0(words, word);
}

std::vector<int> NodeLink::descriptors() const {
  std::vector<int> fds;
  for (const Peer& peer : peers_) {
    if (!peer.lost && !peer.out) fds.push_back(peer.fd);
  }
  return fds;
}

std::optional<std::string> NodeLink::readable(int fd) {
  auto peer = std::find_if(peers_.begin(), peers_.end(), [fd](const Peer& p) { return p.fd == fd; });
  if (peer == peers_.end() || peer->lost || peer->out) return std::nullopt;
  if (!peer->fill()) return peer_lost(*peer, "its connection closed");
  std::optional<std::string> stop;
  while (auto line = peer->take_line()) {
    if (auto why = handle_line_from(*peer, *line); why && !stop) stop = why;
  }
  return stop;
}

std::optional<std::string> NodeLink::peer_lost(Peer& peer, const std::string& how) {
  peer.lost = true;
  if (config_.node_rank != 0) {
    if (!ended_) ended_ = NodeVerdict{false, 0, {}, 1, fmt::format("lost node 0's colo-run ({})", how)};
    return ended_->why;
  }
  if (elastic()) {
    // Under --elastic the job goes on without the node: a restartable failure, unless the node
    // ran no rank of this attempt (nothing of the job was lost with it).
    peer.out = true;
    if (peer.local == 0) return std::nullopt;
    const std::string why = fmt::format("lost node {}'s colo-run ({}); --elastic restarts the job without that node",
                                        peer.node, how);
    if (!first_failure_) {
      first_failure_ = NodeReport{1, "failed", why};
      first_failure_node_ = peer.node;
    }
    broadcast_stop(why, peer.node);
    return why;
  }
  const std::string why = fmt::format("lost node {}'s colo-run ({}); the job cannot go on without that node", peer.node, how);
  if (!first_failure_ || first_failure_->kind != "fatal") {
    first_failure_ = NodeReport{1, "fatal", why};
    first_failure_node_ = peer.node;
  }
  broadcast_stop(why, peer.node);
  return why;
}

void NodeLink::broadcast_stop(const std::string& why, int except_node) {
  for (Peer& peer : peers_) {
    if (peer.node == except_node || peer.stop_sent || peer.done || peer.out) continue;
    peer.stop_sent = true;
    send(peer, fmt::format("stop {} {}", attempt_, why));
  }
}

std::optional<std::string> NodeLink::handle_line_from(Peer& peer, const std::string& line) {
  std::istringstream words(line);
  std::string word;
  words >> word;
  if (config_.node_rank != 0) {
    if (word == "stop") {
      int attempt = -1;
      words >> attempt;
      std::string why;
      std::getline(words >> std::ws, why);
      if (attempt == attempt_) return why;
    } else if (word == "end") {
      ended_ = parse_word_of_node0(words, word);
      return ended_->why.empty() ? std::string("node 0 ended the job") : ended_->why;
    }
    return std::nullopt;
  }
  // Node 0: a node's report.
  int attempt = -1;
  NodeReport report;
  words >> attempt >> report.exit_code >> report.kind;
  if (word == "done") {
    int refused = 0;
    words >> report.slots >> refused;
    report.refused_world = refused != 0;
  }
  std::getline(words >> std::ws, report.why);
  if (attempt != attempt_ || (word != "failed" && word != "done")) return std::nullopt;
  if (word == "done") peer.done = report;
  if (report.kind != "failed" && report.kind != "fatal") return std::nullopt;
  const std::string why = fmt::format("node {}: {}", peer.node, report.why);
  if (!first_failure_) {
    first_failure_ = NodeReport{report.exit_code, report.kind, why};
    first_failure_node_ = peer.node;
  } else if (report.kind == "fatal" && first_failure_->kind != "fatal") {
    first_failure_->kind = "fatal";  // the job ends whatever came first
  }
  broadcast_stop(why, peer.node);
  return why;
}

void NodeLink::failed_here(const NodeReport& report) {
  if (config_.node_rank != 0) {
    send(peers_.front(), fmt::format("failed {} {} {} {}", attempt_, report.exit_code, report.kind, report.why));
    return;
  }
  const std::string why = fmt::format("node 0: {}", report.why);
  if (!first_failure_) {
    first_failure_ = NodeReport{report.exit_code, report.kind, why};
    first_failure_node_ = 0;
  } else if (report.kind == "fatal") {
    first_failure_->kind = "fatal";
  }
  broadcast_stop(why, 0);
}

void NodeLink::end_everywhere(const NodeVerdict& verdict) {
  for (Peer& peer : peers_) {
    if (!peer.out) send(peer, fmt::format("end {} {}", verdict.exit_code, verdict.why));
  }
}

std::optional<NodeShare> NodeLink::assign_and_go(int attempt, int own_slots, const std::string& why,
                                                 std::vector<std::string>& said, std::string& stop_why) {
  const int min = std::max(1, config_.elastic_min);
  if (elastic()) {
    if (own_slots < min) {
      stop_why = fmt::format(
          "elastic: stopping: node 0 can start only {} of its {} slots, fewer than --elastic's MIN {}, and the job "
          "cannot go on without node 0 (its rank 0 serves the store at --master-addr)",
          own_slots, config_.elastic_max, min);
      return std::nullopt;
    }
    for (Peer& peer : peers_) {
      if (peer.out || peer.slots >= min) continue;
      peer.out = true;
      const std::string left = fmt::format(
          "elastic: leaving out node {} from now on: it can start only {} of its slots, fewer than --elastic's MIN {}",
          peer.node, peer.slots, min);
      said.push_back(left);
      send(peer, fmt::format("end 0 {}", left));
    }
  }
  // Each node in node order with what it can start; the world lowered below every refused one by
  // taking ranks off the last nodes first.
  std::vector<std::pair<Peer*, int>> counts;  // nullptr: node 0
  counts.emplace_back(nullptr, own_slots);
  for (Peer& peer : peers_) {
    if (!peer.out) counts.emplace_back(&peer, peer.slots);
  }
  int world = 0;
  for (const auto& [peer, count] : counts) world += count;
  if (elastic() && world > world_cap_) {
    if (world_cap_ < min) {
      stop_why = fmt::format("elastic: stopping: the program cannot use more than {} rank{}, fewer than --elastic's MIN {}",
                             world_cap_, world_cap_ == 1 ? "" : "s", min);
      return std::nullopt;
    }
    for (auto it = counts.rbegin(); it != counts.rend() && world > world_cap_; ++it) {
      const int take = std::min(it->second - (it->first ? 0 : 1), world - world_cap_);
      it->second -= take;
      world -= take;
    }
  }
  if (elastic() && attempt > 0) {
    std::vector<std::string> parts;
    for (const auto& [peer, count] : counts) parts.push_back(fmt::format("node {} {}", peer ? peer->node : 0, count));
    said.push_back(fmt::format("elastic: attempt {} runs {} rank{}: {}", attempt, world, world == 1 ? "" : "s",
                               fmt::join(parts, ", ")));
  }
  begin(attempt);
  last_world_ = world;
  NodeShare own{world, 0, counts.front().second};
  int first = 0;
  for (const auto& [peer, count] : counts) {
    if (peer) {
      peer->local = count;
      send(*peer, fmt::format("go {} {} {} {} {}", attempt, world, first, count, why));
    }
    first += count;
  }
  return own;
}

NodeVerdict NodeLink::finish(const NodeReport& here) {
  if (config_.node_rank != 0) {
    Peer& node0 = peers_.front();
    send(node0, fmt::format("done {} {} {} {} {} {}", attempt_, here.exit_code, here.kind, here.slots,
                            here.refused_world ? 1 : 0, here.why));
    if (ended_) return *ended_;
    for (;;) {
      const auto line = node0.read_line(std::nullopt);
      if (!line) {
        return NodeVerdict{false, 0, {}, 1, "lost node 0's colo-run (its connection closed) while waiting for its word"};
      }
      std::istringstream words(*line);
      std::string word;
      words >> word;
      if (word == "go" || word == "end") {
        NodeVerdict verdict = parse_word_of_node0(words, word);
        if (verdict.restart) begin(verdict.next_attempt);
        return verdict;
      }
      // A late "stop" for the attempt that just ended: nothing to do.
    }
  }

  std::vector<std::string> said;
  // Every other node reports once its ranks have exited; after a failure, within the grace period
  // and some slack, else it is named.
  std::optional<Clock::time_point> deadline;
  auto arm = [&] {
    if (first_failure_ && !deadline) {
      deadline = Clock::now() +
                 std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(config_.grace_period_s)) +
                 kReportSlack;
    }
  };
  auto waiting = [&] {
    return std::any_of(peers_.begin(), peers_.end(), [](const Peer& p) { return !p.lost && !p.out && !p.done; });
  };
  arm();
  while (waiting()) {
    std::vector<pollfd> fds;
    for (const Peer& p : peers_) {
      if (!p.lost && !p.out && !p.done) fds.push_back({p.fd, POLLIN, 0});
    }
    const int ready = ::poll(fds.data(), fds.size(), milliseconds_until(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) break;
    for (const pollfd& p : fds) {
      if (p.revents != 0) readable(p.fd);
    }
    arm();
  }
  std::vector<int> silent, lost;
  for (Peer& p : peers_) {
    if (p.lost && !(elastic() && p.out)) lost.push_back(p.node);
    else if (!p.lost && !p.out && !p.done) silent.push_back(p.node);
  }
  NodeVerdict verdict;
  if (elastic() && !silent.empty()) {
    // Under --elastic a node that does not report is left out like one that went away.
    for (Peer& p : peers_) {
      if (std::find(silent.begin(), silent.end(), p.node) == silent.end()) continue;
      p.out = true;
      said.push_back(fmt::format("elastic: leaving out node {} from now on: it did not report within {:.0f} s of the failure",
                                 p.node, config_.grace_period_s + std::chrono::duration<double>(kReportSlack).count()));
      send(p, fmt::format("end 1 node 0 left this node out: it did not report within the time"));
    }
    silent.clear();
  }
  auto tell = [&] {
    for (const auto& line : said) print_to(STDERR_FILENO, "colo-run: {}\n", line);
  };
  if (!silent.empty() || !lost.empty()) {
    std::vector<std::string> parts;
    if (!lost.empty()) parts.push_back(fmt::format("lost the colo-run of node(s) {}", fmt::join(lost, ", ")));
    if (!silent.empty()) {
      parts.push_back(fmt::format("node(s) {} did not report within {:.0f} s of the failure", fmt::join(silent, ", "),
                                  config_.grace_period_s + std::chrono::duration<double>(kReportSlack).count()));
    }
    verdict = NodeVerdict{false, 0, {}, first_failure_ && first_failure_->exit_code != 0 ? first_failure_->exit_code : 1,
                          fmt::format("{}; the job cannot restart without every node{}", fmt::join(parts, "; "),
                                      first_failure_ ? fmt::format(" (the first failure: {})", first_failure_->why) : "")};
    end_everywhere(verdict);
    tell();
    return verdict;
  }
  if (!first_failure_) {
    verdict = NodeVerdict{false, 0, {}, 0, ""};
    end_everywhere(verdict);
    tell();
    return verdict;
  }
  // Under --elastic a world the program refused (a rank's note, with a usage error's status) is
  // what the next, smaller world answers; any other usage error would fail again.
  bool refused = here.refused_world;
  for (const Peer& p : peers_) refused = refused || (!p.out && p.done && p.done->refused_world);
  refused = refused && elastic();
  verdict.exit_code = first_failure_->exit_code;
  verdict.why = first_failure_->why;
  if (first_failure_->kind == "fatal") {
    verdict.why = fmt::format("not restarting: {}", first_failure_->why);
  } else if (first_failure_->exit_code == kUsageErrorStatus && !refused) {
    verdict.why = fmt::format(
        "not restarting: a rank exited with status {}, a usage error (the same command would fail again); fix what "
        "it said: {}",
        kUsageErrorStatus, first_failure_->why);
  } else if (config_.restart_count >= config_.max_restarts) {
    verdict.why = fmt::format(
        "the job failed and its restarts are spent (--max-restarts {}: {} attempts in all); the last failure: {}",
        config_.max_restarts, config_.restart_count + 1, first_failure_->why);
  } else {
    verdict.restart = true;
  }
  if (!verdict.restart) {
    end_everywhere(verdict);
    tell();
    return verdict;
  }
  if (elastic()) {
    if (refused) {
      world_cap_ = std::min(world_cap_, last_world_ - 1);
      said.push_back(fmt::format("elastic: the program cannot run on {} rank{}", last_world_, last_world_ == 1 ? "" : "s"));
    }
    for (Peer& p : peers_) {
      if (!p.out && p.done) p.slots = p.done->slots;
    }
  }
  std::string stop_why;
  const auto share = assign_and_go(attempt_ + 1, elastic() ? here.slots : config_.nproc_per_node, verdict.why, said,
                                   stop_why);
  if (!share) {
    verdict.restart = false;
    verdict.why = fmt::format("{}; the last failure: {}", stop_why, first_failure_->why);
    end_everywhere(verdict);
    tell();
    return verdict;
  }
  verdict.next_attempt = attempt_;  // assign_and_go began it
  verdict.share = *share;
  tell();
  return verdict;
}

}  // namespace colo::launcher
