// NodeLink: the nodes' colo-runs agreeing on each restart (node_link.h says the protocol).
#include "node_link.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <limits>
#include <cerrno>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "hmac_sha256.h"
#include "job_token.h"
#include "output.h"
#include "posix.h"

namespace colo::launcher {

namespace {

using Clock = std::chrono::steady_clock;

// How long one connection may take to prove its token before node 0 moves on to the next, so that
// a stray connection that says nothing cannot hold the real nodes back.
constexpr auto kHandshakeTimeout = std::chrono::seconds(10);
// After a failure, how long node 0 waits beyond the grace period for a node to report that its
// ranks have exited (they are stopped with SIGTERM, then SIGKILL after the grace period).
constexpr auto kReportSlack = std::chrono::seconds(30);
// A line longer than this is not the protocol's: the connection is dropped.
constexpr std::size_t kMaxLine = 64 * 1024;

// The proof one side gives of the token: HMAC over the other side's nonce, bound to the direction.
std::string proof(const std::string& token, int from, int to, const std::string& nonce) {
  return dist::to_hex(dist::hmac_sha256(token, fmt::format("colo-run node {} to node {}: {}", from, to, nonce)));
}

bool proof_matches(const std::string& expected, const std::string& given) {
  if (expected.size() != given.size()) return false;
  unsigned char diff = 0;  // in time that does not depend on where they differ
  for (std::size_t i = 0; i < expected.size(); ++i) diff |= static_cast<unsigned char>(expected[i] ^ given[i]);
  return diff == 0;
}

std::string one_line(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

int milliseconds_until(std::optional<Clock::time_point> deadline) {
  if (!deadline) return -1;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - Clock::now()).count();
  return static_cast<int>(std::max<long long>(0, left));
}

// Keep-alive probes find a peer whose host went away without closing the connection: ~25 s.
void keep_alive(int fd) {
  const int on = 1, idle = 10, interval = 5, count = 3;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
}

struct AddrInfo {
  addrinfo* list = nullptr;
  ~AddrInfo() {
    if (list) ::freeaddrinfo(list);
  }
};

void resolve(const LaunchConfig& config, AddrInfo& out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  const std::string port = std::to_string(config.control_port);
  const int rc = ::getaddrinfo(config.master_addr.c_str(), port.c_str(), &hints, &out.list);
  if (rc != 0) {
    throw std::runtime_error(fmt::format("cannot resolve --master-addr '{}': {}", config.master_addr, gai_strerror(rc)));
  }
}

}  // namespace

std::string control_endpoint(const LaunchConfig& config) {
  return fmt::format("{}:{}", config.master_addr, config.control_port);
}

struct NodeLink::Peer {
  int node = 0;
  int fd = -1;
  std::string buffer;  // bytes read past the last whole line
  bool lost = false;
  std::optional<NodeReport> done;  // node 0: the node's report of the current attempt
  bool stop_sent = false;
  int slots = 0;      // node 0: the ranks the node can start (its hello, then each report)
  int local = 0;      // node 0: the ranks it runs in the current attempt
  bool out = false;   // node 0, --elastic: left out of the job for good

  // One whole line if the buffer holds one.
  std::optional<std::string> take_line() {
    const auto end = buffer.find('\n');
    if (end == std::string::npos) return std::nullopt;
    std::string line = buffer.substr(0, end);
    buffer.erase(0, end + 1);
    return line;
  }
  // Reads what is there (once). False at end of file or on an error.
  bool fill() {
    char chunk[4096];
    for (;;) {
      const ssize_t n = ::read(fd, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      buffer.append(chunk, static_cast<std::size_t>(n));
      return buffer.size() <= kMaxLine || buffer.find('\n') != std::string::npos;
    }
  }
  // Blocks (until `deadline`) for the next line; nullopt at end of file, on an error or at the deadline.
  std::optional<std::string> read_line(std::optional<Clock::time_point> deadline) {
    for (;;) {
      if (auto line = take_line()) return line;
      pollfd p{fd, POLLIN, 0};
      const int ready = ::poll(&p, 1, milliseconds_until(deadline));
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) return std::nullopt;
      if (!fill()) return std::nullopt;
    }
  }
};

namespace {

// Node 0's side of one connection's handshake: the node it says it is once it has proved the token.
std::optional<int> admit(NodeLink::Peer& peer, const LaunchConfig& config, const std::string& from,
                         const std::vector<bool>& joined);

}  // namespace

NodeLink::NodeLink(const LaunchConfig& config) : config_(config) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(config.timeout_ms);
  AddrInfo addresses;
  resolve(config, addresses);
  if (config.node_rank == 0) {
    int listener = -1;
    std::string bind_error = "no address";
    for (addrinfo* a = addresses.list; a && listener < 0; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      const int on = 1;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
      if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 64) == 0) {
        listener = fd;
      } else {
        bind_error = errno_text(errno);
        ::close(fd);
      }
    }
    if (listener < 0) {
      throw std::runtime_error(fmt::format(
          "node 0 cannot listen for the other nodes' colo-run at {} (--control-port): {}; pick a free port with "
          "--control-port, the same on every node",
          control_endpoint(config), bind_error));
    }
    std::vector<bool> joined(static_cast<std::size_t>(config.nnodes), false);
    joined[0] = true;
    int waiting = config.nnodes - 1;
    while (waiting > 0) {
      pollfd p{listener, POLLIN, 0};
      const int ready = ::poll(&p, 1, milliseconds_until(deadline));
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) break;
      sockaddr_storage from{};
      socklen_t from_size = sizeof from;
      const int fd = ::accept4(listener, reinterpret_cast<sockaddr*>(&from), &from_size, SOCK_CLOEXEC);
      if (fd < 0) continue;
      char host[NI_MAXHOST] = "?";
      ::getnameinfo(reinterpret_cast<sockaddr*>(&from), from_size, host, sizeof host, nullptr, 0, NI_NUMERICHOST);
      Peer peer;
      peer.fd = fd;
      if (const auto node = admit(peer, config, host, joined)) {
        keep_alive(fd);
        peer.node = *node;
        joined[static_cast<std::size_t>(*node)] = true;
        peers_.push_back(std::move(peer));
        --waiting;
      } else {
        ::close(fd);
      }
    }
    ::close(listener);
    if (waiting > 0) {
      std::vector<int> missing;
      for (int n = 1; n < config.nnodes; ++n) {
        if (!joined[static_cast<std::size_t>(n)]) missing.push_back(n);
      }
      for (Peer& peer : peers_) send(peer, fmt::format("end 1 node(s) {} never joined", fmt::join(missing, ", ")));
      throw std::runtime_error(fmt::format(
          "node(s) {} did not connect to node 0's colo-run at {} within the job's timeout ({} ms, COLO_TIMEOUT_MS): "
          "start colo-run on every node with the same --nnodes, --master-addr, --master-port, --control-port and "
          "COLO_JOB_TOKEN",
          fmt::join(missing, ", "), control_endpoint(config), config.timeout_ms));
    }
    std::sort(peers_.begin(), peers_.end(), [](const Peer& a, const Peer& b) { return a.node < b.node; });
    return;
  }

  // Another node: connect, retrying until the deadline (node 0 may start later).
  int fd = -1;
  std::string last_error = "no address";
  while (fd < 0) {
    for (addrinfo* a = addresses.list; a && fd < 0; a = a->ai_next) {
      const int s = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (s < 0) continue;
      if (::connect(s, a->ai_addr, a->ai_addrlen) == 0) {
        fd = s;
      } else {
        last_error = errno_text(errno);
        ::close(s);
      }
    }
    if (fd >= 0) break;
    if (Clock::now() >= deadline) {
      throw std::runtime_error(fmt::format(
          "cannot reach node 0's colo-run at {} (--master-addr, --control-port) within the job's timeout ({} ms, "
          "COLO_TIMEOUT_MS): {}; is node 0's colo-run started with --max-restarts and the same ports?",
          control_endpoint(config), config.timeout_ms, last_error));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  keep_alive(fd);
  Peer node0;
  node0.fd = fd;
  node0.node = 0;
  const std::string nonce = new_job_token();
  send(node0, fmt::format("hello {} {} {}", config.node_rank, nonce, config.nproc_per_node));
  const auto handshake_deadline = std::min(deadline, Clock::now() + kHandshakeTimeout);
  std::istringstream answer(node0.read_line(handshake_deadline).value_or(""));
  std::string word, node0_nonce, node0_proof;
  answer >> word >> node0_nonce >> node0_proof;
  if (word != "proof0" || !proof_matches(proof(config.job_token, 0, config.node_rank, nonce), node0_proof)) {
    ::close(fd);
    throw std::runtime_error(fmt::format(
        "what answered at {} did not prove it holds this job's token: it is not this job's node 0, or the nodes' "
        "COLO_JOB_TOKEN differ (give every node node 0's token)",
        control_endpoint(config)));
  }
  send(node0, fmt::format("proof {}", proof(config.job_token, config.node_rank, 0, node0_nonce)));
  if (node0.lost) {
    ::close(fd);
    throw std::runtime_error(fmt::format("node 0's colo-run at {} closed the connection during the handshake",
                                         control_endpoint(config)));
  }
  peers_.push_back(std::move(node0));
}

namespace {

std::optional<int> admit(NodeLink::Peer& peer, const LaunchConfig& config, const std::string& from,
                         const std::vector<bool>& joined) {
  const auto deadline = Clock::now() + kHandshakeTimeout;
  std::istringstream hello(peer.read_line(deadline).value_or(""));
  std::string word, nonce;
  int node = -1;
  hello >> word >> node >> nonce >> peer.slots;
  if (word != "hello" || node < 1 || node >= config.nnodes || nonce.empty() || peer.slots < 1) {
    print_to(STDERR_FILENO, "colo-run: refused a connection to the control port from {}: it did not say which node it is\n",
             from);
    return std::nullopt;
  }
  if (joined[static_cast<std::size_t>(node)]) {
    print_to(STDERR_FILENO, "colo-run: refused a second colo-run from {} that says it is node {}\n", from, node);
    return std::nullopt;
  }
  const std::string own_nonce = new_job_token();
  const std::string line = fmt::format("proof0 {} {}\n", own_nonce, proof(config.job_token, 0, node, nonce));
  if (::send(peer.fd, line.data(), line.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(line.size())) return std::nullopt;
  std::istringstream answer(peer.read_line(deadline).value_or(""));
  std::string given;
  answer >> word >> given;
  if (word != "proof" || !proof_matches(proof(config.job_token, node, 0, own_nonce), given)) {
    print_to(STDERR_FILENO,
             "colo-run: refused a colo-run from {} that says it is node {}: it did not prove it holds this job's token "
             "(COLO_JOB_TOKEN)\n",
             from, node);
    return std::nullopt;
  }
  return node;
}

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
