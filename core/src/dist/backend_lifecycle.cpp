// Making and ending a group's c10d backend (see backend_lifecycle.h).
#include "backend_lifecycle.h"

#include "peer_addresses.h"

#include <colo/dist/backend_choice.h>

#include <torch/cuda.h>

#include <csignal>
#include <cstdio>
#include <functional>
#include <future>
#include <memory>
#include <thread>

namespace colo::dist {

// COLO_BACKEND's, or NCCL where a CUDA GPU is visible (backend_choice.h).
Backend default_backend() { return backend_choice().backend; }

compat::CommBackendPtr make_backend(Backend backend, const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                    std::chrono::milliseconds timeout, bool loopback_only, PeerAddresses& peers) {
  if (backend == Backend::kNccl) {
#ifdef USE_C10D_NCCL
    return compat::make_nccl_backend(store, rank, size, timeout);
#else
    throw std::invalid_argument("the NCCL backend was requested but this LibTorch has no NCCL; use gloo");
#endif
  }
  // Gloo writes to its peers' sockets without MSG_NOSIGNAL: a write to a peer that died raises
  // SIGPIPE, which would end this rank silently instead of failing the collective with an error
  // that names the peer. Ignore it (as Python, and so every PyTorch job, does) unless the program
  // chose a handler of its own.
  static const bool sigpipe_ignored = [] {
    struct sigaction current {};
    if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) std::signal(SIGPIPE, SIG_IGN);
    return true;
  }();
  (void)sigpipe_ignored;
  auto created = compat::make_gloo_backend(peers.recording(store), rank, size, timeout, loopback_only);
  peers.learn(size);
  // Gloo counts a pair as connected once its TCP handshake is done, before the peer has accepted
  // it: a member that returned here and closed the group at once (a plugin refusing its options
  // right after making its mesh) tore its sockets down while a slower member was still accepting
  // them, which then failed with "Connection closed by peer". A barrier returns only once every
  // member has connected every pair.
  if (size > 1) {
    c10d::BarrierOptions options;
    options.timeout = timeout;
    created->barrier(options)->wait();
  }
  return created;
}

namespace {

// Runs `work` on a thread of its own and waits up to `limit` for it; false when it did not end in
// time. The thread is then left behind: what it waits for (a collective whose peer died, a backend
// destructor waiting for such a collective) may never end, and close() must still return. `work`
// owns everything it touches. A failure is printed, prefixed with `what`.
bool finishes_within(std::chrono::milliseconds limit, const std::string& what, std::function<void()> work) {
  auto finished = std::make_shared<std::promise<void>>();
  auto future = finished->get_future();
  std::thread([finished, what, work = std::move(work)] {
    try {
      work();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "colo: %s: %s\n", what.c_str(), e.what());
    } catch (...) {
      std::fprintf(stderr, "colo: %s: unknown error\n", what.c_str());
    }
    finished->set_value();
  }).detach();
  return future.wait_for(limit) == std::future_status::ready;
}

}  // namespace

void close_backend(compat::CommBackendPtr backend, int cuda_device, const std::string& what,
                   std::chrono::milliseconds limit) {
  if (cuda_device >= 0) {
    const bool drained = finishes_within(limit, what, [cuda_device] { torch::cuda::synchronize(cuda_device); });
    if (!drained) {
      std::fprintf(stderr,
                   "colo: %s: the GPU work queued on it did not finish within %lld ms (a peer may have died in the "
                   "middle of a collective); aborting its communicators\n",
                   what.c_str(), static_cast<long long>(limit.count()));
    }
  }
  // Abort (NCCL: communicators, then the watchdog threads are told to end), then drop the last
  // reference: the destructor joins the backend's threads (Gloo: after its queued work).
  const bool stopped = finishes_within(limit, what, [backend = std::move(backend)]() mutable {
    compat::abort_backend(*backend);
    backend.reset();
  });
  if (!stopped) {
    std::fprintf(stderr, "colo: %s: its backend did not shut down within %lld ms; leaving it behind\n", what.c_str(),
                 static_cast<long long>(limit.count()));
  }
}

}  // namespace colo::dist
