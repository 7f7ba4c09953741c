#pragma once

#include <colo/compat/torch_compat.h>
#include <colo/dist/process_group.h>

#include <chrono>
#include <string>

namespace colo::dist {

class PeerAddresses;

// How a group's c10d backend is made and ended (process_group.cpp holds the group itself).

// NCCL where this LibTorch has it and a GPU is there, else Gloo.
Backend default_backend();

// A Gloo or NCCL backend over `store` for `size` members. Gloo: its pairs listen on 127.0.0.1
// when `loopback_only` (every rank on this machine), and `peers` learns where each member
// listens, to name it in failures (peer_addresses.h).
compat::CommBackendPtr make_backend(Backend backend, const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                    std::chrono::milliseconds timeout, bool loopback_only, PeerAddresses& peers);

// How long each of close()'s two waits lasts at most: enough for any collective of a healthy job
// and for a backend's shutdown, short enough that an exit beside a dead peer is not held up for a
// whole group timeout.
constexpr std::chrono::milliseconds kCloseLimit{std::chrono::seconds(30)};

// close()'s work: drains the GPU the backend's communicators belong to (cuda_device; -1: none),
// aborts the backend and drops it, each of the two steps bounded by `limit`.
void close_backend(compat::CommBackendPtr backend, int cuda_device, const std::string& what,
                   std::chrono::milliseconds limit);

}  // namespace colo::dist
