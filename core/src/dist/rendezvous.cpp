#include "rendezvous.h"

#include "admission.h"
#include "signed_store.h"

#include <colo/compat/torch_compat.h>
#include <colo/dist/errors.h>

#include <fmt/format.h>
#include <netdb.h>
#include <sys/socket.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace colo::dist {
namespace {

// A socket bound to MASTER_ADDR:MASTER_PORT and listening, for rank 0's store to serve on (where
// this LibTorch's TCPStore takes one): the store is then reachable through that address only,
// not through every interface of the machine.
int listen_on_master_address(const Environment& env) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(env.master_port);
  if (int rc = ::getaddrinfo(env.master_addr.c_str(), port.c_str(), &hints, &found); rc != 0) {
    throw DistError(fmt::format("rank 0: cannot resolve MASTER_ADDR '{}': {}", env.master_addr, ::gai_strerror(rc)));
  }
  std::string error = "no address";
  int fd = -1;
  for (addrinfo* ai = found; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      error = std::strerror(errno);
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, 2048) != 0) {
      error = std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd < 0) {
    throw DistError(fmt::format("rank 0 serves the job's store on MASTER_ADDR:MASTER_PORT ({}:{}) and cannot listen "
                                "there: {}. MASTER_ADDR must be an address of rank 0's machine, and the port free",
                                env.master_addr, env.master_port, error));
  }
  return fd;
}

c10::intrusive_ptr<c10d::Store> open_store(const Environment& env, std::chrono::milliseconds timeout) {
  if (!env.rdzv_file.empty()) {
    auto store = c10::make_intrusive<c10d::FileStore>(env.rdzv_file, env.world_size);
    store->setTimeout(timeout);
    return store;
  }
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(env.master_port);
  options.isServer = env.rank == 0;
  options.numWorkers = env.world_size;
  options.waitWorkers = false;  // admission names the missing ranks instead
  options.timeout = timeout;
  if (options.isServer) {
    if constexpr (compat::kTcpStoreServesABoundSocket) {
      compat::serve_on(options, listen_on_master_address(env));
    } else {
      std::fprintf(stderr,
                   "colo: rank 0: the job's store listens on port %d of every network interface of this machine, "
                   "not on MASTER_ADDR (%s) alone: LibTorch %d.%d's TCPStore cannot be bound to one address. The "
                   "job token guards what the ranks accept from the store, not who connects to it; on one node, "
                   "colo-run's file store opens no port\n",
                   env.master_port, env.master_addr.c_str(), TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR);
    }
  }
  try {
    return c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
  } catch (const std::exception& e) {
    throw DistError(fmt::format("rank {}: could not reach the rendezvous store at {}:{} ({}); check MASTER_ADDR/"
                                "MASTER_PORT and that rank 0 is running",
                                env.rank, env.master_addr, env.master_port, e.what()));
  }
}

}  // namespace

c10::intrusive_ptr<c10d::Store> rendezvous(const Environment& env, std::chrono::milliseconds timeout) {
  auto store = open_store(env, timeout);
  admit_ranks(*store, env, timeout);
  if (env.job_token.empty()) return store;
  return c10::make_intrusive<SignedStore>(store, env.job_token);
}

}  // namespace colo::dist
