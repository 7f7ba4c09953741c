// NodeLink's constructor: node 0 listens and admits the other nodes' colo-runs, each of which
// connects and proves it holds the job's token (node_link.h says the protocol).
#include "node_link.h"
#include "node_link_peer.h"

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

using node_link_detail::Clock;
using node_link_detail::milliseconds_until;

// How long one connection may take to prove its token before node 0 moves on to the next, so that
// a stray connection that says nothing cannot hold the real nodes back.
constexpr auto kHandshakeTimeout = std::chrono::seconds(10);

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

}  // namespace colo::launcher
