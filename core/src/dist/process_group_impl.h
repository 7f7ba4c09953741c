// What process_group.cpp and work.cpp share and nobody else sees: the group's private state
// (ProcessGroup::Impl) and a Work's (Work::State).
#pragma once

#include <colo/compat/torch_compat.h>
#include <colo/dist/process_group.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "collective_progress.h"
#include "peer_addresses.h"

namespace colo::dist {

struct ProcessGroup::Impl {
  compat::CommBackendPtr backend;
  // The job's key-value store (unprefixed: the world and every subgroup share it).
  c10::intrusive_ptr<c10d::Store> store;
  // How many groups each (name, ranks) key has produced, so that creating the same group
  // twice uses fresh store keys. Shared by a world and all its subgroups.
  std::shared_ptr<std::map<std::string, int>> creations;
  // The GPU the group's NCCL communicators belong to (the device current when it was created);
  // -1 for Gloo.
  int cuda_device = -1;
  // The collectives' numbers, and where the members were seen waiting (kept after close(), so
  // that a Work still held can report).
  std::unique_ptr<CollectiveProgress> progress;
  // Gloo: where each member listens, to name the one whose connection failed (peer_addresses.h).
  PeerAddresses peers;
  // Gloo: the pairs listen on 127.0.0.1 only (every rank of the job runs on this machine).
  bool loopback_only = false;
  // COLO_RUN_REPORTS: where a rank that lost a peer leaves colo-run a note (wait_failure.h).
  std::string run_reports;
};

struct Work::State {
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  std::string op;
  const ProcessGroup* group = nullptr;
  std::function<void()> on_complete;
  // The collective's number in its group; 0 for point-to-point operations, which only some
  // members take part in.
  uint64_t sequence = 0;
  bool recorded = false;  // this rank's arrival is in the store (a slow wait)
  bool done = false;
};

}  // namespace colo::dist
