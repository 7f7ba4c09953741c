#include "rendezvous.h"

#include <colo/dist/errors.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <thread>

namespace colo::dist {
namespace {

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
  options.waitWorkers = false;  // check-in below names the missing ranks instead
  options.timeout = timeout;
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
  store->set(fmt::format("colo/arrived/{}", env.rank), std::vector<uint8_t>{1});
  std::vector<std::string> keys;
  for (int r = 0; r < env.world_size; ++r) keys.push_back(fmt::format("colo/arrived/{}", r));
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!store->check(keys)) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::vector<int> missing;
      for (int r = 0; r < env.world_size; ++r) {
        if (!store->check({keys[r]})) missing.push_back(r);
      }
      throw DistError(fmt::format("rendezvous timed out after {} ms: rank(s) {} never arrived (world size {})",
                                  timeout.count(), fmt::join(missing, ","), env.world_size));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return store;
}

}  // namespace colo::dist
